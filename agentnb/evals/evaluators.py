"""Evaluators of replayed turns: pydantic-evals' own, plus agentnb's five, plus a judge model.

Every evaluator is a ``pydantic_evals.evaluators.Evaluator``: pydantic-evals' built-ins
(``EqualsExpected``, ``Contains``, ``LLMJudge``...) and custom subclasses work unchanged. The
context a replay hands them (``EvaluatorContext``) holds the case's input as ``inputs``, its
expected output, the new output, the recorded case as ``metadata`` (``tool_calls``,
``answers``, usage...), the replay's tool calls in ``attributes["tool_calls"]`` and its
numbers in ``metrics`` (``input_tokens``, ``output_tokens``, ``model_calls``, ``latency_ms``,
``unrecorded_calls``, ``unanswered_requests``).

agentnb's: ``ToolTrajectory`` (the tools called against the recording), ``NoUnrecordedCalls``,
``TokensBelow``, ``LatencyBelow``, ``SameAnswerAs`` (the answer another experiment gave).

``judge_model(model)`` lets pydantic-evals' ``LLMJudge`` grade with any agentnb model (a
``ScriptedModel`` in tests, ``nb.models.from_string(...)`` for real): it is a pydantic-ai
``FunctionModel`` that hands each request to the agentnb model and its reply back. (The other
way, a judge run as an agentnb agent in the experiment's log, would record the judge's calls,
but would make a second judge framework; the adapter keeps ``LLMJudge`` as it is.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentnb.errors import InvalidInput, install_hint
from agentnb.evals._deps import pydantic_evals
from agentnb.events import Message, decode_json
from agentnb.ids import new_id
from agentnb.models.base import Model, ModelRequest

if TYPE_CHECKING:
    from pydantic_ai.models.function import FunctionModel

__all__ = [
    "LatencyBelow",
    "NoUnrecordedCalls",
    "SameAnswerAs",
    "TokensBelow",
    "ToolTrajectory",
    "judge_model",
]

Evaluator = pydantic_evals.evaluators.Evaluator
EvaluatorContext = pydantic_evals.evaluators.EvaluatorContext
EvaluationReason = pydantic_evals.evaluators.EvaluationReason


@dataclass(repr=False)
class ToolTrajectory(Evaluator[object, object, object]):
    """Whether the replay called the tools the recording did.

    ``match="exact"``: the same names in the same order; ``"in_order"``: the recorded calls
    appear in that order (other calls may come between); ``"set"``: the same set of tools.
    ``expected`` gives the trajectory instead of the recording's.
    """

    match: Literal["exact", "in_order", "set"] = "exact"
    expected: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.match not in ("exact", "in_order", "set"):
            raise InvalidInput(f"match must be 'exact', 'in_order' or 'set', got {self.match!r}")

    def evaluate(self, ctx: EvaluatorContext[object, object, object]) -> EvaluationReason:
        recorded = list(self.expected) if self.expected is not None else _recorded_tools(ctx)
        called = [c["name"] for c in ctx.attributes.get("tool_calls", ())]
        if self.match == "exact":
            ok = called == recorded
        elif self.match == "set":
            ok = set(called) == set(recorded)
        else:
            rest = iter(called)
            ok = all(name in rest for name in recorded)
        return EvaluationReason(ok, f"called {called}, recorded {recorded} ({self.match})")


def _recorded_tools(ctx: EvaluatorContext[object, object, object]) -> list[str]:
    metadata = ctx.metadata if isinstance(ctx.metadata, Mapping) else {}
    return [c["name"] for c in metadata.get("tool_calls", ())]


@dataclass(repr=False)
class NoUnrecordedCalls(Evaluator[object, object, object]):
    """Whether every tool call and request of the replay was served from the recording."""

    def evaluate(self, ctx: EvaluatorContext[object, object, object]) -> EvaluationReason:
        calls = int(ctx.metrics.get("unrecorded_calls", 0))
        asks = int(ctx.metrics.get("unanswered_requests", 0))
        return EvaluationReason(
            calls == 0 and asks == 0,
            f"{calls} call(s) without a recorded result, {asks} request(s) without a "
            "recorded answer",
        )


@dataclass(repr=False)
class TokensBelow(Evaluator[object, object, object]):
    """Whether the replay used fewer than ``n`` tokens (input and output; or ``which``)."""

    n: int
    which: Literal["total", "input", "output"] = "total"

    def evaluate(self, ctx: EvaluatorContext[object, object, object]) -> EvaluationReason:
        used = {
            "input": ctx.metrics.get("input_tokens", 0),
            "output": ctx.metrics.get("output_tokens", 0),
        }
        count = used["input"] + used["output"] if self.which == "total" else used[self.which]
        return EvaluationReason(count < self.n, f"{count} {self.which} tokens (limit {self.n})")


@dataclass(repr=False)
class LatencyBelow(Evaluator[object, object, object]):
    """Whether the replayed turn took less than ``ms`` milliseconds (start to end)."""

    ms: float

    def evaluate(self, ctx: EvaluatorContext[object, object, object]) -> EvaluationReason:
        took = ctx.metrics.get("latency_ms")
        if took is None:
            return EvaluationReason(False, "the turn did not finish")
        return EvaluationReason(took < self.ms, f"{took:.1f} ms (limit {self.ms} ms)")


@dataclass(repr=False)
class SameAnswerAs(Evaluator[object, object, object]):
    """Whether the replay answered what ``baseline`` did for the same case: another
    ``Experiment``, a ``Dataset`` (its recorded outputs) or a mapping of case name to text.
    Compared after stripping surrounding whitespace."""

    baseline: Any = field(repr=False)

    def __post_init__(self) -> None:
        self._answers = _answers_of(self.baseline)

    def evaluate(self, ctx: EvaluatorContext[object, object, object]) -> EvaluationReason:
        if ctx.name not in self._answers:
            return EvaluationReason(False, "the baseline has no such case")
        theirs = self._answers[ctx.name]
        ours = ctx.output if isinstance(ctx.output, str) or ctx.output is None else str(ctx.output)
        same = (ours or "").strip() == (theirs or "").strip()
        return EvaluationReason(same, "same answer" if same else "the answers differ")


def _answers_of(baseline: Any) -> dict[str, str | None]:
    outputs = getattr(baseline, "outputs", None)
    if callable(outputs):  # an Experiment
        found: dict[str, str | None] = outputs()
        return found
    cases = getattr(baseline, "cases", None)
    if cases is not None and not callable(cases):  # a Dataset
        return {c.name: c.output for c in cases}
    if isinstance(baseline, Mapping):
        return {str(k): None if v is None else str(v) for k, v in baseline.items()}
    raise InvalidInput(
        "SameAnswerAs(baseline) takes an Experiment, a Dataset or a mapping of case name to text"
    )


# --------------------------------------------------------------------------------------------


def judge_model(model: Model, *, name: str | None = None) -> FunctionModel:
    """A pydantic-ai model that asks the agentnb ``model``: give it to pydantic-evals'
    ``LLMJudge(rubric=..., model=judge_model(m))``.

    Each request goes to ``model.complete`` with the conversation as agentnb messages and the
    judge's output tool as a tool; a reply that calls a tool becomes that call, and a reply of
    JSON text (what the judge's instructions ask for) becomes a call of the output tool.
    """
    if not isinstance(model, Model):
        raise InvalidInput(f"judge_model takes an agentnb Model, got {type(model).__name__}")
    try:
        from pydantic_ai import messages as pm
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError as exc:  # pragma: no cover - pydantic-evals depends on pydantic-ai-slim
        raise ImportError("judge_model needs pydantic-ai: " + install_hint("evals")) from exc

    async def ask(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        tools: list[dict[str, Any]] = [
            {
                "name": t.name,
                "description": t.description or "",
                "parameters": dict(t.parameters_json_schema),
            }
            for t in [*info.function_tools, *info.output_tools]
        ]
        request = ModelRequest(
            messages=tuple(_to_agentnb(messages, info.instructions)), tools=tuple(tools)
        )
        reply = await model.complete(request)
        if reply.tool_calls:
            parts: list[Any] = [
                pm.ToolCallPart(c.name, dict(c.arguments), tool_call_id=c.call_id)
                for c in reply.tool_calls
            ]
            return pm.ModelResponse(parts=parts, model_name=model.name)
        if info.output_tools and not info.allow_text_output:
            parsed = _json_object(reply.text)
            if parsed is not None:
                call = pm.ToolCallPart(info.output_tools[0].name, parsed)
                return pm.ModelResponse(parts=[call], model_name=model.name)
        return pm.ModelResponse(parts=[pm.TextPart(reply.text)], model_name=model.name)

    return FunctionModel(ask, model_name=name or f"agentnb:{model.name}")


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds (allowing a Markdown fence around it), or None."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        value = decode_json(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _to_agentnb(messages: Sequence[Any], instructions: str | None) -> list[Message]:
    from pydantic_ai import messages as pm

    out: list[Message] = []
    if instructions:
        out.append(Message(id=new_id("msg"), role="system", text=instructions))
    for message in messages:
        if isinstance(message, pm.ModelRequest):
            for part in message.parts:
                if isinstance(part, pm.SystemPromptPart):
                    out.append(Message(id=new_id("msg"), role="system", text=part.content))
                elif isinstance(part, pm.UserPromptPart):
                    content = part.content
                    text = (
                        content
                        if isinstance(content, str)
                        else "\n".join(c for c in content if isinstance(c, str))
                    )
                    out.append(Message(id=new_id("msg"), role="user", text=text))
                elif isinstance(part, pm.ToolReturnPart):
                    out.append(
                        Message(
                            id=new_id("msg"),
                            role="tool",
                            text=part.model_response_str(),
                            call_id=part.tool_call_id,
                            name=part.tool_name,
                        )
                    )
                elif isinstance(part, pm.RetryPromptPart):
                    out.append(Message(id=new_id("msg"), role="user", text=part.model_response()))
        elif isinstance(message, pm.ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart))
            calls = [
                {"call_id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_dict()}
                for p in message.parts
                if isinstance(p, pm.ToolCallPart)
            ]
            out.append(Message(id=new_id("msg"), role="assistant", text=text, tool_calls=calls))
    return out


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """One result of one evaluator on one case (a mapping output gives several)."""

    name: str
    value: bool | int | float | str | None
    """None when the evaluator failed (``reason`` says how)."""
    reason: str | None
    evaluator: str

    @property
    def number(self) -> float | None:
        """The value as a number (``True`` 1, ``False`` 0), None for labels and failures."""
        if isinstance(self.value, bool | int | float):
            return float(self.value)
        return None


def run_evaluators(
    evaluators: Sequence[Evaluator[Any, Any, Any]],
    ctx: EvaluatorContext[Any, Any, Any],
) -> list[Score]:
    """Every evaluator on ``ctx``, in order; one that raises gives a failed ``Score``."""
    return asyncio.run(_run_all(evaluators, ctx))


async def _run_all(
    evaluators: Sequence[Evaluator[Any, Any, Any]], ctx: EvaluatorContext[Any, Any, Any]
) -> list[Score]:
    scores: list[Score] = []
    for evaluator in evaluators:
        name = evaluator.get_default_evaluation_name()
        try:
            output = await evaluator.evaluate_async(ctx)
        except Exception as exc:  # noqa: BLE001 - a failing evaluator is a result, as in pydantic-evals
            scores.append(Score(name, None, f"{type(exc).__name__}: {exc}", name))
            continue
        results = output if isinstance(output, Mapping) else {name: output}
        for key, result in results.items():
            if isinstance(result, EvaluationReason):
                scores.append(Score(str(key), result.value, result.reason, name))
            elif isinstance(result, bool | int | float | str):
                scores.append(Score(str(key), result, None, name))
            else:
                scores.append(Score(str(key), None, f"returned {result!r}", name))
    return scores


def check_evaluators(evaluators: object) -> tuple[Evaluator[Any, Any, Any], ...]:
    """``evaluators`` as a tuple of pydantic-evals evaluators; ``InvalidInput`` if not."""
    if isinstance(evaluators, Evaluator) or not isinstance(evaluators, Sequence):
        raise InvalidInput("evaluators must be a list of pydantic-evals Evaluator instances")
    for e in evaluators:
        if not isinstance(e, Evaluator):
            raise InvalidInput(
                f"{e!r} is not a pydantic_evals.evaluators.Evaluator (an instance of one: "
                "EqualsExpected(), ToolTrajectory(), ...)"
            )
    return tuple(evaluators)
