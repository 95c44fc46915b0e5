-- agentnb export schema: analyst views over the raw exported events.
--
-- Input: a relation named raw_events with one row per exported event (columns listed in
-- agentnb/export/columns.py: envelope, session key, flattened payload fields, payload JSON).
--   * a DuckDB export (agentnb export --to duckdb:FILE) has it as a table, and these views;
--   * over a Parquet export, create it first: SET VARIABLE parquet_root = 'DIR';
--     .read exporters/parquet.sql   (then .read exporters/schema.sql)
--
-- Column names follow the OpenTelemetry GenAI conventions where one exists:
--   session_id    = gen_ai.conversation.id        agent_id      = gen_ai.agent.id
--   request_model = gen_ai.request.model          finish_reason = gen_ai.response.finish_reasons
--   input_tokens  = gen_ai.usage.input_tokens     output_tokens = gen_ai.usage.output_tokens
--   tool_name     = gen_ai.tool.name              call_id       = gen_ai.tool.call.id
--   arguments     = gen_ai.tool.call.arguments    output        = gen_ai.tool.call.result
-- Times are TIMESTAMPTZ (UTC); durations are BIGINT/DOUBLE milliseconds (suffix _ms).
-- raw_events must hold each event_id once: the sinks guarantee it (Parquet readers take exactly
-- the manifest's files; the DuckDB table is keyed by event_id), and parquet.sql, which globs
-- every file, removes the copies a crash can leave.
-- Sum tokens over model_calls (or turns/runs, which sum model calls), never over both.

-- events: every committed event exactly once.
CREATE OR REPLACE VIEW events AS
SELECT * FROM raw_events;

-- turn_rollup: what the turns view shows of each turn, as aggregates of the events at hand.
-- Each value that is "the latest/first of" something carries the seq it was taken at
-- (*_seq), so the rows of one turn from two parts of its log combine exactly (seqs of a turn
-- are one session's): the Parquet sink combines them as it commits.
CREATE OR REPLACE VIEW turn_rollup AS
SELECT
  any_value(namespace) AS namespace, any_value(user_id) AS user_id,
  any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
  turn_id,
  arg_min(text, seq) FILTER (WHERE type = 'turn/start') AS input,
  min(seq) FILTER (WHERE type = 'turn/start' AND text IS NOT NULL) AS input_seq,
  min(occurred_at) FILTER (WHERE type = 'turn/start') AS started_at,
  arg_max(
    CASE WHEN type IN ('turn/start', 'turn/resumed') THEN 'running' ELSE split_part(type, '/', 2) END,
    seq
  ) FILTER (WHERE type IN ('turn/start', 'turn/resumed', 'turn/completed', 'turn/failed',
                           'turn/suspended', 'turn/interrupted', 'turn/cancelled')) AS status,
  arg_max(occurred_at, seq) FILTER (WHERE type IN ('turn/start', 'turn/resumed', 'turn/completed',
      'turn/failed', 'turn/suspended', 'turn/interrupted', 'turn/cancelled')) AS status_at,
  max(seq) FILTER (WHERE type IN ('turn/start', 'turn/resumed', 'turn/completed', 'turn/failed',
                                  'turn/suspended', 'turn/interrupted', 'turn/cancelled')) AS status_seq,
  arg_max(error, seq) FILTER (WHERE type = 'turn/failed') AS error,
  max(seq) FILTER (WHERE type = 'turn/failed' AND error IS NOT NULL) AS error_seq,
  arg_max(text, seq) FILTER (WHERE type = 'turn/output') AS output,
  max(seq) FILTER (WHERE type = 'turn/output' AND text IS NOT NULL) AS output_seq,
  count(*) FILTER (WHERE type = 'run/start') AS runs,
  count(*) FILTER (WHERE type = 'step/start') AS steps,
  count(*) FILTER (WHERE type = 'model/end') AS model_calls,
  count(*) FILTER (WHERE type = 'tool/requested') AS tool_calls,
  count(*) FILTER (WHERE type = 'tool/result' AND status = 'error') AS tool_errors,
  count(*) FILTER (WHERE type = 'input/received' AND kind = 'steer') AS steers,
  count(*) FILTER (WHERE type = 'interaction/requested') AS interactions,
  count(*) FILTER (WHERE type = 'turn/interrupted') AS interrupts,
  CAST(sum(input_tokens) FILTER (WHERE type = 'model/end') AS BIGINT) AS input_tokens,
  CAST(sum(output_tokens) FILTER (WHERE type = 'model/end') AS BIGINT) AS output_tokens,
  max(occurred_at) AS last_event_at
FROM events
WHERE turn_id IS NOT NULL
  AND type IN ('turn/start', 'turn/resumed', 'turn/completed', 'turn/failed', 'turn/suspended',
               'turn/interrupted', 'turn/cancelled', 'turn/output', 'run/start', 'step/start',
               'model/end', 'tool/requested', 'tool/result', 'input/received',
               'interaction/requested', 'run/end')
GROUP BY turn_id;

-- turn_parts: turn_rollup, one row per turn. The sinks keep it as they commit: a DuckDB
-- export in its table turn_rollups, a Parquet export in rollup files its readers
-- (parquet.sql, agentnb.analysis) read; so over an export, turns never rescans the events.
CREATE VIEW IF NOT EXISTS turn_parts AS SELECT * FROM turn_rollup;

-- turns: one row per turn (a submitted task); status is the latest turn status.
--   status: running | suspended | interrupted | completed | failed | cancelled
--   duration_ms: turn start to its final status (completed/failed/cancelled), waits included.
CREATE OR REPLACE VIEW turns AS
SELECT
  namespace, user_id, agent_id, session_id, turn_id, input,
  coalesce(status, 'running') AS status,
  started_at,
  CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN status_at END AS ended_at,
  CASE WHEN status IN ('completed', 'failed', 'cancelled')
       THEN epoch_ms(status_at) - epoch_ms(started_at) END AS duration_ms,
  runs, steps, model_calls, tool_calls, tool_errors, steers, interactions, interrupts,
  coalesce(input_tokens, 0) AS input_tokens, coalesce(output_tokens, 0) AS output_tokens,
  error, output, last_event_at
FROM turn_parts;

-- runs: one row per run (one execution of a turn; resume and respond start new runs).
--   reason: submit | resume | respond | recovery | steer (why the run started)
--   status: completed | suspended | interrupted | failed | cancelled, or running while open
--   (interrupted when a recovery closed it after a crash without a run/end).
--   end_reason: why it ended: the reason recorded (crash, a time limit, ...), else the run's
--   stop code (final_answer, needs_person, error, max_steps, ...; 'interrupt requested' when
--   an interrupt command stopped it, 'cancelled' when a cancel of its turn did: the turn was
--   cancelled after the run ended, before any other run of it started).
CREATE OR REPLACE VIEW runs AS
WITH recovered AS (
  SELECT DISTINCT unnest(from_json(json_extract(payload, '$.interrupted_runs'), '["VARCHAR"]')) AS run_id
  FROM events WHERE type = 'recovery/applied'
), cancelled AS (
  SELECT turn_id, min(seq) AS cancelled_seq FROM events
  WHERE type = 'turn/cancelled' GROUP BY turn_id
), agg AS (
  SELECT
    any_value(namespace) AS namespace, any_value(user_id) AS user_id,
    any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
    any_value(turn_id) AS turn_id, run_id,
    arg_min(reason, seq) FILTER (WHERE type = 'run/start') AS reason,
    arg_min(command_id, seq) FILTER (WHERE type = 'run/start') AS command_id,
    min(occurred_at) FILTER (WHERE type = 'run/start') AS started_at,
    max(occurred_at) FILTER (WHERE type = 'run/end') AS ended_at,
    arg_max(status, seq) FILTER (WHERE type = 'run/end') AS end_status,
    coalesce(
      arg_max_null(reason, seq) FILTER (WHERE type = 'run/end'),
      arg_max_null(
        CASE json_extract_string(payload, '$.stop_reason')
          WHEN 'interrupted' THEN 'interrupt requested'
          ELSE json_extract_string(payload, '$.stop_reason') END,
        seq) FILTER (WHERE type = 'run/end')
    ) AS end_reason,
    arg_max_null(error, seq) FILTER (WHERE type = 'run/end') AS error,
    min(seq) FILTER (WHERE type = 'run/start') AS start_seq,
    max(seq) FILTER (WHERE type = 'run/end') AS end_seq,
    count(*) FILTER (WHERE type = 'run/stop_requested') > 0 AS stop_requested,
    count(*) FILTER (WHERE type = 'step/start') AS steps,
    count(*) FILTER (WHERE type = 'model/end') AS model_calls,
    count(*) FILTER (WHERE type = 'tool/dispatch') AS tool_calls,
    CAST(coalesce(sum(input_tokens) FILTER (WHERE type = 'model/end'), 0) AS BIGINT) AS input_tokens,
    CAST(coalesce(sum(output_tokens) FILTER (WHERE type = 'model/end'), 0) AS BIGINT) AS output_tokens
  FROM events
  WHERE run_id IS NOT NULL
    AND type IN ('run/start', 'run/end', 'run/stop_requested', 'step/start', 'model/end',
                 'tool/dispatch')
  GROUP BY run_id
), ended AS (
  SELECT agg.*, lead(start_seq) OVER (PARTITION BY turn_id ORDER BY start_seq) AS next_start_seq
  FROM agg
)
SELECT
  a.namespace, a.user_id, a.agent_id, a.session_id, a.turn_id, a.run_id,
  row_number() OVER (PARTITION BY a.turn_id ORDER BY a.started_at, a.run_id) AS run_index,
  a.reason, a.command_id, a.started_at, a.ended_at,
  coalesce(a.end_status, CASE WHEN r.run_id IS NOT NULL THEN 'interrupted' ELSE 'running' END) AS status,
  CASE WHEN a.end_reason = 'interrupt requested' AND c.cancelled_seq > a.end_seq
            AND (a.next_start_seq IS NULL OR a.next_start_seq > c.cancelled_seq)
       THEN 'cancelled' ELSE a.end_reason END AS end_reason,
  a.error, a.stop_requested,
  epoch_ms(a.ended_at) - epoch_ms(a.started_at) AS duration_ms,
  a.steps, a.model_calls, a.tool_calls, a.input_tokens, a.output_tokens
FROM ended AS a LEFT JOIN recovered AS r USING (run_id)
LEFT JOIN cancelled AS c ON c.turn_id = a.turn_id;

-- steps: one row per reasoning step (build context -> model call -> tool calls -> checkpoint).
--   status: continued | terminal, or NULL while the step is open.
CREATE OR REPLACE VIEW stepped_events AS
-- The run events that steps and model_calls count, each tagged with the step it falls in.
SELECT *,
  last_value(CASE WHEN type = 'step/start' THEN step_id END IGNORE NULLS)
    OVER (PARTITION BY run_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    AS in_step
FROM events
WHERE run_id IS NOT NULL
  AND type IN ('step/start', 'step/end', 'model/end', 'tool/dispatch', 'input/received',
               'request/prepared', 'model/dispatch', 'model/retry');

CREATE OR REPLACE VIEW steps AS
WITH tagged AS (
  SELECT * FROM stepped_events
  WHERE type IN ('step/start', 'step/end', 'model/end', 'tool/dispatch', 'input/received')
)
SELECT
  any_value(namespace) AS namespace, any_value(user_id) AS user_id,
  any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
  any_value(turn_id) AS turn_id, any_value(run_id) AS run_id, in_step AS step_id,
  min(iteration) FILTER (WHERE type = 'step/start') AS iteration,
  min(occurred_at) FILTER (WHERE type = 'step/start') AS started_at,
  max(occurred_at) FILTER (WHERE type = 'step/end') AS ended_at,
  arg_max(status, seq) FILTER (WHERE type = 'step/end') AS status,
  epoch_ms(max(occurred_at) FILTER (WHERE type = 'step/end'))
    - epoch_ms(min(occurred_at) FILTER (WHERE type = 'step/start')) AS duration_ms,
  count(*) FILTER (WHERE type = 'model/end') AS model_calls,
  count(*) FILTER (WHERE type = 'tool/dispatch') AS tool_calls,
  count(*) FILTER (WHERE type = 'input/received') AS inputs
FROM tagged
WHERE in_step IS NOT NULL
GROUP BY in_step;

-- model_calls: one row per model call (gen_ai "chat" span); retries are attempts of one call.
--   status: completed | failed | cancelled, or incomplete when no model/end was committed.
--   purpose: reasoning (a step of the agent) or the auxiliary job, e.g. compaction (the
--   summariser; request/prepared.purpose). The tokens of turns and runs count every call.
--   cached_tokens / cache_write_tokens: the part of input_tokens read from / written to the
--   provider's prompt cache; reasoning_tokens: the part of output_tokens spent reasoning;
--   reasoning_chars: characters of reasoning text the reply streamed (0: none);
--   usage_estimated: the server sent no usage, the adapter counted the tokens.
CREATE OR REPLACE VIEW model_calls AS
WITH tagged AS (
  SELECT * FROM stepped_events
  WHERE type IN ('step/start', 'request/prepared', 'model/dispatch', 'model/retry', 'model/end')
)
SELECT
  any_value(namespace) AS namespace, any_value(user_id) AS user_id,
  any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
  any_value(turn_id) AS turn_id, any_value(run_id) AS run_id, any_value(in_step) AS step_id,
  model_call_id,
  arg_max(model, seq) FILTER (WHERE model IS NOT NULL) AS request_model,
  min(occurred_at) FILTER (WHERE type = 'model/dispatch') AS started_at,
  max(occurred_at) FILTER (WHERE type = 'model/end') AS ended_at,
  count(*) FILTER (WHERE type = 'model/dispatch') AS attempts,
  count(*) FILTER (WHERE type = 'model/retry') AS retries,
  coalesce(arg_max(status, seq) FILTER (WHERE type = 'model/end'), 'incomplete') AS status,
  arg_max(input_tokens, seq) FILTER (WHERE type = 'model/end') AS input_tokens,
  arg_max(output_tokens, seq) FILTER (WHERE type = 'model/end') AS output_tokens,
  arg_max(TRY_CAST(json_extract(payload, '$.cached_tokens') AS BIGINT), seq)
    FILTER (WHERE type = 'model/end') AS cached_tokens,
  arg_max(TRY_CAST(json_extract(payload, '$.cache_write_tokens') AS BIGINT), seq)
    FILTER (WHERE type = 'model/end') AS cache_write_tokens,
  arg_max(TRY_CAST(json_extract(payload, '$.reasoning_tokens') AS BIGINT), seq)
    FILTER (WHERE type = 'model/end') AS reasoning_tokens,
  coalesce(arg_max(TRY_CAST(json_extract(payload, '$.reasoning_chars') AS BIGINT), seq)
    FILTER (WHERE type = 'model/end' AND status = 'completed'), 0) AS reasoning_chars,
  coalesce(arg_max(TRY_CAST(json_extract(payload, '$.usage_estimated') AS BOOLEAN), seq)
    FILTER (WHERE type = 'model/end' AND status = 'completed'), false) AS usage_estimated,
  arg_max(latency_ms, seq) FILTER (WHERE type = 'model/end') AS latency_ms,
  arg_max(finish_reason, seq) FILTER (WHERE type = 'model/end') AS finish_reason,
  coalesce(arg_max(error, seq) FILTER (WHERE type = 'model/end'),
           arg_max(error, seq) FILTER (WHERE type = 'model/retry')) AS error,
  coalesce(arg_max(json_extract_string(payload, '$.purpose'), seq)
             FILTER (WHERE type = 'request/prepared'), 'reasoning') AS purpose
FROM tagged
WHERE model_call_id IS NOT NULL
GROUP BY model_call_id;

-- interactions: one row per human-in-the-loop request (confirmation, external_execution,
-- ask_user). status: pending | answered | cancelled. approved/reason come from a confirmation's
-- answer; answered_by is the session's user (the person who may answer its requests).
--   arguments: the call's arguments as the model asked for them (JSON text);
--   approved_arguments: those the tool ran with once approved (the person's edit, else the
--   asked ones; NULL unless approved); edited: whether the person changed them.
CREATE OR REPLACE VIEW interactions AS
WITH req AS (
  SELECT * FROM events WHERE type = 'interaction/requested'
  QUALIFY row_number() OVER (PARTITION BY request_id ORDER BY seq) = 1
), res AS (
  SELECT request_id,
    arg_max(occurred_at, seq) AS resolved_at, arg_max(status, seq) AS status,
    arg_max(answer, seq) AS answer, arg_max(command_id, seq) AS command_id
  FROM events WHERE type = 'interaction/resolved' GROUP BY request_id
)
SELECT
  q.namespace, q.user_id, q.agent_id, q.session_id, q.turn_id, q.run_id,
  q.request_id, q.kind, q.call_id, q.tool_name, q.arguments, q.prompt,
  q.occurred_at AS requested_at, s.resolved_at,
  coalesce(s.status, 'pending') AS status,
  s.answer,
  TRY_CAST(json_extract(s.answer, '$.approved') AS BOOLEAN) AS approved,
  CASE WHEN TRY_CAST(json_extract(s.answer, '$.approved') AS BOOLEAN)
       THEN coalesce(CAST(json_extract(s.answer, '$.edited_args') AS VARCHAR), q.arguments)
  END AS approved_arguments,
  coalesce(json_extract(s.answer, '$.edited_args') IS NOT NULL, false) AS edited,
  json_extract_string(s.answer, '$.reason') AS reason,
  json_extract_string(s.answer, '$.output') AS answer_output,
  CASE WHEN s.resolved_at IS NOT NULL THEN q.user_id END AS answered_by,
  s.command_id,
  epoch_ms(s.resolved_at) - epoch_ms(q.occurred_at) AS wait_ms
FROM req AS q LEFT JOIN res AS s USING (request_id);

-- tool_calls: one row per tool call (gen_ai "execute_tool" span), across runs of its turn.
--   outcome: the recorded tool/result status: success | error | cancelled | denied | unknown
--   status:  outcome, or reconciled (a person recorded the outcome of an uncertain call),
--            unknown (dispatched, then its run ended without a result: a crash),
--            running (dispatched, run still open), waiting (awaiting approval, or a
--            sub-agent call whose run ended before its child did), requested.
--   uncertain: the call's outcome was not observed when it ran (unknown at some point);
--              never for a sub-agent call (its child session says what happened).
--   decision: allowed | denied, once a person answered the call's confirmation (the runtime
--             records the answer as interaction/resolved, not as a second tool/decision);
--             otherwise the runtime's tool/decision: allowed | suspended | denied.
--   decision_reason: the person's reason when they rejected it, else tool/decision's reason.
CREATE OR REPLACE VIEW tool_calls AS
WITH ended AS (
  SELECT DISTINCT run_id FROM events WHERE type = 'run/end'
), delegated AS (
  SELECT DISTINCT namespace, user_id, agent_id, session_id, call_id
  FROM events WHERE type = 'subagent/spawned'
), call_turn AS (
  -- a reconciled result may carry no turn_id: take the turn that requested the call
  SELECT namespace, user_id, agent_id, session_id, call_id, arg_max(turn_id, seq) AS req_turn
  FROM events
  WHERE type IN ('tool/requested', 'tool/dispatch') AND turn_id IS NOT NULL
  GROUP BY namespace, user_id, agent_id, session_id, call_id
), tool_events AS (
  SELECT e.* REPLACE (coalesce(e.turn_id, c.req_turn) AS turn_id)
  FROM events AS e
  LEFT JOIN call_turn AS c USING (namespace, user_id, agent_id, session_id, call_id)
  WHERE e.call_id IS NOT NULL
    AND e.type IN ('tool/requested', 'tool/decision', 'tool/dispatch', 'tool/result')
), agg AS (
  SELECT
    any_value(namespace) AS namespace, any_value(user_id) AS user_id,
    any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
    turn_id, call_id,
    arg_min(run_id, seq) AS run_id,
    arg_min(tool_name, seq) FILTER (WHERE tool_name IS NOT NULL) AS tool_name,
    arg_min(arguments, seq) FILTER (WHERE type IN ('tool/requested', 'tool/dispatch')) AS arguments,
    min(occurred_at) AS requested_at,
    arg_max(decision, seq) FILTER (WHERE type = 'tool/decision') AS decision,
    arg_max_null(reason, seq) FILTER (WHERE type = 'tool/decision') AS decision_reason,
    min(occurred_at) FILTER (WHERE type = 'tool/dispatch') AS dispatched_at,
    arg_max(run_id, seq) FILTER (WHERE type = 'tool/dispatch') AS dispatch_run_id,
    count(*) FILTER (WHERE type = 'tool/dispatch') AS attempts,
    coalesce(bool_or(idempotent) FILTER (WHERE type = 'tool/dispatch'), false) AS idempotent,
    max(occurred_at) FILTER (WHERE type = 'tool/result') AS ended_at,
    arg_max(status, seq) FILTER (WHERE type = 'tool/result') AS outcome,
    arg_max_null(output, seq) FILTER (WHERE type = 'tool/result') AS output,
    arg_max(duration_ms, seq) FILTER (WHERE type = 'tool/result' AND duration_ms IS NOT NULL)
      AS duration_ms,
    coalesce(bool_or(synthetic) FILTER (WHERE type = 'tool/result'), false) AS synthetic,
    coalesce(bool_or(reconciled) FILTER (WHERE type = 'tool/result'), false) AS reconciled,
    coalesce(bool_or(status = 'unknown') FILTER (WHERE type = 'tool/result'), false) AS was_unknown
  FROM tool_events
  WHERE turn_id IS NOT NULL
  GROUP BY turn_id, call_id
)
SELECT
  a.namespace, a.user_id, a.agent_id, a.session_id, a.turn_id, a.run_id, a.call_id,
  a.tool_name, a.arguments, a.requested_at,
  CASE WHEN i.approved THEN 'allowed' WHEN NOT i.approved THEN 'denied' ELSE a.decision END
    AS decision,
  CASE WHEN i.approved IS NOT NULL THEN i.reason ELSE a.decision_reason END AS decision_reason,
  a.dispatched_at, a.attempts, a.idempotent, a.ended_at,
  CASE
    WHEN a.reconciled THEN 'reconciled'
    WHEN a.outcome IS NOT NULL THEN a.outcome
    WHEN a.dispatched_at IS NOT NULL AND e.run_id IS NOT NULL AND d.call_id IS NOT NULL
      THEN 'waiting'
    WHEN a.dispatched_at IS NOT NULL AND e.run_id IS NOT NULL THEN 'unknown'
    WHEN a.dispatched_at IS NOT NULL THEN 'running'
    WHEN a.decision = 'suspended' THEN 'waiting'
    ELSE 'requested'
  END AS status,
  a.outcome, a.output, a.duration_ms, a.synthetic, a.reconciled,
  (a.reconciled OR a.was_unknown
    OR (a.dispatched_at IS NOT NULL AND a.outcome IS NULL AND e.run_id IS NOT NULL
        AND d.call_id IS NULL)) AS uncertain,
  i.request_id, i.approved, i.wait_ms AS approval_wait_ms
FROM agg AS a
LEFT JOIN ended AS e ON e.run_id = a.dispatch_run_id
LEFT JOIN delegated AS d
  ON d.namespace = a.namespace AND d.user_id = a.user_id AND d.agent_id = a.agent_id
     AND d.session_id = a.session_id AND d.call_id = a.call_id
LEFT JOIN interactions AS i ON i.turn_id = a.turn_id AND i.call_id = a.call_id;

-- inputs: one row per input bound for the model: the task (submit), steering, injected
-- material, answers. status: applied (part of a checkpointed context) | discarded | pending.
CREATE OR REPLACE VIEW inputs AS
WITH rec AS (
  SELECT * FROM events WHERE type = 'input/received'
  QUALIFY row_number() OVER (PARTITION BY input_id ORDER BY seq) = 1
), app AS (
  SELECT input_id, min(occurred_at) AS applied_at, arg_min(run_id, seq) AS applied_run_id
  FROM (SELECT unnest(input_ids) AS input_id, occurred_at, seq, run_id
        FROM events WHERE type = 'input/applied')
  GROUP BY input_id
), dis AS (
  SELECT input_id, min(occurred_at) AS discarded_at, arg_min(reason, seq) AS discard_reason
  FROM (SELECT unnest(input_ids) AS input_id, occurred_at, seq, reason
        FROM events WHERE type = 'input/discarded')
  GROUP BY input_id
)
SELECT
  r.namespace, r.user_id, r.agent_id, r.session_id, r.turn_id, r.run_id,
  r.input_id, r.kind, r.text, r.command_id,
  r.occurred_at AS received_at, app.applied_at, app.applied_run_id,
  dis.discarded_at, dis.discard_reason,
  CASE WHEN app.applied_at IS NOT NULL THEN 'applied'
       WHEN dis.discarded_at IS NOT NULL THEN 'discarded'
       ELSE 'pending' END AS status
FROM rec AS r
LEFT JOIN app USING (input_id)
LEFT JOIN dis USING (input_id);

-- compactions: each compaction of a session's working context (what the next model call
-- sees); the log keeps every original message. tokens_saved = tokens_before - tokens_after.
CREATE OR REPLACE VIEW compactions AS
SELECT
  namespace, user_id, agent_id, session_id, turn_id, run_id, seq,
  occurred_at AS ended_at,
  json_extract_string(payload, '$.compaction_id') AS compaction_id,
  json_extract_string(payload, '$.status') AS status,
  TRY_CAST(json_extract(payload, '$.before_count') AS BIGINT) AS messages_before,
  TRY_CAST(json_extract(payload, '$.after_count') AS BIGINT) AS messages_after,
  TRY_CAST(json_extract(payload, '$.tokens_before') AS BIGINT) AS tokens_before,
  TRY_CAST(json_extract(payload, '$.tokens_after') AS BIGINT) AS tokens_after,
  TRY_CAST(json_extract(payload, '$.tokens_before') AS BIGINT)
    - TRY_CAST(json_extract(payload, '$.tokens_after') AS BIGINT) AS tokens_saved,
  json_extract_string(payload, '$.summary') AS summary,
  json_extract_string(payload, '$.error') AS error
FROM raw_events
WHERE type = 'compaction/end';

-- sessions: one row per session, with its place in a tree of sub-agents (from the log alone:
-- a child session's first event, subagent/linked, names its parent and root).
--   session_key / parent_key / root_key: 'namespace/user_id/agent_id/session_id'
--   depth: 0 for a root session, 1 for its children, ...
--   parent_turn_id / parent_call_id: the parent's turn and the sub-agent call that made it
CREATE OR REPLACE VIEW sessions AS
WITH agg AS (
  SELECT namespace, user_id, agent_id, session_id,
    min(occurred_at) AS first_event_at, max(occurred_at) AS last_event_at,
    count(*) AS events,
    count(*) FILTER (WHERE type = 'turn/start') AS turns,
    CAST(coalesce(sum(input_tokens) FILTER (WHERE type = 'model/end'), 0) AS BIGINT) AS input_tokens,
    CAST(coalesce(sum(output_tokens) FILTER (WHERE type = 'model/end'), 0) AS BIGINT) AS output_tokens
  FROM events
  GROUP BY namespace, user_id, agent_id, session_id
), link AS (
  SELECT namespace, user_id, agent_id, session_id,
    json_extract_string(payload, '$.parent.namespace') || '/'
      || json_extract_string(payload, '$.parent.user_id') || '/'
      || json_extract_string(payload, '$.parent.agent_id') || '/'
      || json_extract_string(payload, '$.parent.session_id') AS parent_key,
    json_extract_string(payload, '$.root.namespace') || '/'
      || json_extract_string(payload, '$.root.user_id') || '/'
      || json_extract_string(payload, '$.root.agent_id') || '/'
      || json_extract_string(payload, '$.root.session_id') AS root_key,
    TRY_CAST(json_extract(payload, '$.depth') AS BIGINT) AS depth,
    json_extract_string(payload, '$.turn_id') AS parent_turn_id,
    json_extract_string(payload, '$.call_id') AS parent_call_id
  FROM events
  WHERE type = 'subagent/linked'
)
SELECT
  a.namespace, a.user_id, a.agent_id, a.session_id,
  a.namespace || '/' || a.user_id || '/' || a.agent_id || '/' || a.session_id AS session_key,
  l.parent_key,
  coalesce(l.root_key,
           a.namespace || '/' || a.user_id || '/' || a.agent_id || '/' || a.session_id) AS root_key,
  coalesce(l.depth, 0) AS depth,
  l.parent_turn_id, l.parent_call_id,
  a.first_event_at, a.last_event_at, a.events, a.turns, a.input_tokens, a.output_tokens
FROM agg AS a
LEFT JOIN link AS l USING (namespace, user_id, agent_id, session_id);

-- subagent_calls: one row per sub-agent call (in the calling session's log), with its child.
--   status: running until the call has its result, then completed | failed | cancelled
--   input_tokens / output_tokens: what the child's task consumed (its own sub-agents' too)
CREATE OR REPLACE VIEW subagent_calls AS
WITH spawned AS (
  SELECT * FROM events WHERE type = 'subagent/spawned'
  QUALIFY row_number() OVER (PARTITION BY session_id, call_id ORDER BY seq) = 1
), done AS (
  SELECT namespace, user_id, agent_id, session_id, call_id,
    arg_max(occurred_at, seq) AS completed_at, arg_max(status, seq) AS status,
    arg_max(output, seq) AS output, arg_max(error, seq) AS error,
    arg_max(payload, seq) AS payload
  FROM events WHERE type = 'subagent/completed'
  GROUP BY namespace, user_id, agent_id, session_id, call_id
)
SELECT
  s.namespace, s.user_id, s.agent_id, s.session_id,
  s.namespace || '/' || s.user_id || '/' || s.agent_id || '/' || s.session_id AS session_key,
  s.turn_id, s.run_id, s.call_id,
  json_extract_string(s.payload, '$.name') AS tool_name,
  json_extract_string(s.payload, '$.agent_id') AS child_agent_id,
  json_extract_string(s.payload, '$.child.session_id') AS child_session_id,
  json_extract_string(s.payload, '$.child.namespace') || '/'
    || json_extract_string(s.payload, '$.child.user_id') || '/'
    || json_extract_string(s.payload, '$.child.agent_id') || '/'
    || json_extract_string(s.payload, '$.child.session_id') AS child_key,
  json_extract_string(s.payload, '$.task') AS task,
  json_extract_string(s.payload, '$.on_parent_stop') AS on_parent_stop,
  s.occurred_at AS spawned_at, d.completed_at,
  coalesce(d.status, 'running') AS status, d.output, d.error,
  epoch_ms(d.completed_at) - epoch_ms(s.occurred_at) AS duration_ms,
  CAST(coalesce(TRY_CAST(json_extract(d.payload, '$.usage.input_tokens') AS BIGINT), 0) AS BIGINT)
    AS input_tokens,
  CAST(coalesce(TRY_CAST(json_extract(d.payload, '$.usage.output_tokens') AS BIGINT), 0) AS BIGINT)
    AS output_tokens,
  CAST(coalesce(TRY_CAST(json_extract(d.payload, '$.usage.model_calls') AS BIGINT), 0) AS BIGINT)
    AS model_calls
FROM spawned AS s
LEFT JOIN done AS d USING (namespace, user_id, agent_id, session_id, call_id);

-- turn_totals: turns with their sub-agents rolled up (turns counts the turn's own model calls;
-- here total_* add what its sub-agent calls consumed, their whole tree included).
CREATE OR REPLACE VIEW turn_totals AS
WITH sub AS (
  SELECT namespace, user_id, agent_id, session_id, turn_id,
    count(*) AS subagent_calls,
    CAST(sum(input_tokens) AS BIGINT) AS subagent_input_tokens,
    CAST(sum(output_tokens) AS BIGINT) AS subagent_output_tokens
  FROM subagent_calls
  GROUP BY namespace, user_id, agent_id, session_id, turn_id
)
SELECT
  t.*,
  coalesce(s.subagent_calls, 0) AS subagent_calls,
  coalesce(s.subagent_input_tokens, 0) AS subagent_input_tokens,
  coalesce(s.subagent_output_tokens, 0) AS subagent_output_tokens,
  t.input_tokens + coalesce(s.subagent_input_tokens, 0) AS total_input_tokens,
  t.output_tokens + coalesce(s.subagent_output_tokens, 0) AS total_output_tokens
FROM turns AS t
LEFT JOIN sub AS s USING (namespace, user_id, agent_id, session_id, turn_id);

-- plan_changes: each step of a plan (the built-in todo tool) that was added, changed status
-- or wording, or was removed, in order. status: pending | in_progress | completed | removed.
CREATE OR REPLACE VIEW plan_changes AS
SELECT
  namespace, user_id, agent_id, session_id, turn_id, run_id, seq, occurred_at, call_id,
  json_extract_string(payload, '$.id') AS step_id,
  json_extract_string(payload, '$.content') AS content,
  status,
  json_extract_string(payload, '$.previous') AS previous
FROM events
WHERE type = 'task/changed';

-- verifications: each check of a turn's answer by the agent's verify hook (Agent(verify=)),
-- in order. passed: whether it passed; reason: why not; attempt: 1, then 2 after the turn
-- went back to the model (retry); message_id: the assistant message checked.
CREATE OR REPLACE VIEW verifications AS
SELECT
  namespace, user_id, agent_id, session_id, turn_id, run_id, seq, occurred_at,
  json_extract(payload, '$.passed')::BOOLEAN AS passed,
  json_extract_string(payload, '$.reason') AS reason,
  TRY_CAST(json_extract_string(payload, '$.attempt') AS BIGINT) AS attempt,
  json_extract(payload, '$.retry')::BOOLEAN AS retry,
  json_extract_string(payload, '$.message_id') AS message_id
FROM events
WHERE type = 'verification/result';

-- feedback: the ratings of turns in force (session.feedback), one row each: feedback/added
-- less those a later feedback/removed retracted. score: 1 thumbs up, 0 thumbs down (any
-- number); negative: a score of 0 or below, or the label 'negative'; given_by: the by= of
-- the call (a user id, or 'evaluator:NAME' for the scores of an nb.evals replay).
CREATE OR REPLACE VIEW feedback AS
WITH removed AS (
  SELECT namespace, user_id, agent_id, session_id,
         json_extract_string(payload, '$.feedback_id') AS feedback_id
  FROM events WHERE type = 'feedback/removed'
)
SELECT
  a.namespace, a.user_id, a.agent_id, a.session_id, a.turn_id, a.seq, a.occurred_at,
  json_extract_string(a.payload, '$.feedback_id') AS feedback_id,
  TRY_CAST(json_extract_string(a.payload, '$.score') AS DOUBLE) AS score,
  json_extract_string(a.payload, '$.label') AS label,
  json_extract_string(a.payload, '$.comment') AS comment,
  json_extract_string(a.payload, '$.by') AS given_by,
  coalesce(TRY_CAST(json_extract_string(a.payload, '$.score') AS DOUBLE) <= 0, false)
    OR coalesce(json_extract_string(a.payload, '$.label') = 'negative', false) AS negative
FROM events AS a
WHERE a.type = 'feedback/added'
  AND NOT EXISTS (
    SELECT 1 FROM removed AS r
    WHERE r.namespace = a.namespace AND r.user_id = a.user_id AND r.agent_id = a.agent_id
      AND r.session_id = a.session_id
      AND r.feedback_id = json_extract_string(a.payload, '$.feedback_id')
  );

-- experiment_cases: each case an nb.evals replay ran (its sessions live in the namespace
-- evals/EXPERIMENT; each session is one case, named by the recorded turn it replays), with
-- the replay's turn: input, output, status, duration, tokens, tool calls, the calls the
-- recording held no result for (unrecorded_calls) and the agent's fingerprint
-- (agentnb.permissions.agent_digest of its agent/bound payload).
CREATE OR REPLACE VIEW experiment_cases AS
WITH bound AS (
  SELECT namespace, user_id, agent_id, session_id,
         arg_max(left(sha256(payload), 32), seq) AS agent_fingerprint
  FROM events WHERE type IN ('agent/bound') AND namespace LIKE 'evals/%'
  GROUP BY ALL
), unrecorded AS (
  SELECT namespace, user_id, agent_id, session_id, turn_id, count(*) AS unrecorded_calls
  FROM events
  WHERE type = 'tool/result' AND namespace LIKE 'evals/%'
    AND output LIKE 'Error: UnrecordedCall: no recorded result for %'
  GROUP BY ALL
)
SELECT
  substr(t.namespace, 7) AS experiment, t.session_id AS case_name, t.namespace, t.user_id,
  t.agent_id, t.turn_id, t.input, t.output, t.status, t.started_at, t.ended_at, t.duration_ms,
  t.input_tokens, t.output_tokens, t.model_calls, t.tool_calls,
  coalesce(u.unrecorded_calls, 0) AS unrecorded_calls, b.agent_fingerprint
FROM turns AS t
LEFT JOIN bound AS b USING (namespace, user_id, agent_id, session_id)
LEFT JOIN unrecorded AS u USING (namespace, user_id, agent_id, session_id, turn_id)
WHERE t.namespace LIKE 'evals/%';

-- scores: each score an evaluator gave a replayed case (recorded as feedback by
-- 'evaluator:NAME'): value (booleans 1/0), label (a text result), reason, when.
CREATE OR REPLACE VIEW scores AS
SELECT
  c.experiment, c.case_name, f.turn_id, substr(f.given_by, 11) AS score, f.score AS value,
  f.label, f.comment AS reason, f.occurred_at AS scored_at, c.agent_id, c.agent_fingerprint
FROM feedback AS f
JOIN experiment_cases AS c USING (namespace, user_id, agent_id, turn_id)
WHERE f.given_by LIKE 'evaluator:%';

-- experiments: one row per nb.evals experiment: its agent(s), cases, when it ran, tokens,
-- mean duration and unrecorded calls.
CREATE OR REPLACE VIEW experiments AS
SELECT
  experiment, any_value(agent_id) AS agent_id,
  count(DISTINCT agent_fingerprint) AS fingerprints, any_value(agent_fingerprint) AS agent_fingerprint,
  count(*) AS cases, count(*) FILTER (WHERE status = 'completed') AS completed,
  min(started_at) AS started_at, max(ended_at) AS ended_at,
  sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
  avg(duration_ms) AS mean_duration_ms, sum(unrecorded_calls) AS unrecorded_calls
FROM experiment_cases
GROUP BY experiment;
