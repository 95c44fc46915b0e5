"""LangGraph 1.x + SqliteSaver baseline for ``bench_runtime.py``.

One agent step is one loop iteration of a ``StateGraph``: a deterministic "model" node
(no network) that asks for a no-op tool on the first ``steps_per_turn - 1`` steps of a turn
and gives a final answer on the last, and a "tools" node that runs the no-op tool. A
conditional edge loops model -> tools -> model until the final answer, so each turn runs
``steps_per_turn`` model steps, as a tool-calling agent loop does.

Durability is set to match agentnb's store: a file-backed ``SqliteSaver`` whose connection
uses WAL with ``PRAGMA synchronous=FULL``, and every turn is invoked with
``durability="sync"`` (``Pregel.invoke(..., durability=...)`` in LangGraph 1.x: each
superstep's checkpoint is persisted before the next step starts). All turns run on one
``thread_id``, so the conversation's messages accumulate as in a chat.

Needs the ``bench`` extra (``pip install -e ".[bench]"``). Run directly for a JSON line:

    python benchmarks/_langgraph_baseline.py --turns 200
"""

import argparse
import json
import sqlite3
import tempfile
import time
import uuid
from contextlib import closing
from importlib import metadata
from pathlib import Path
from typing import Any

TOOL_NAME = "noop"


def langgraph_versions() -> dict[str, str]:
    """Installed versions of the packages this baseline measures."""
    out: dict[str, str] = {}
    for dist in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _build_graph(steps_per_turn: int, checkpointer: Any) -> Any:
    """Compile the model/tools loop with ``checkpointer``."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    class AgentState(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        turn_step: int  # model steps taken so far in the current turn

    def model(state: AgentState) -> dict[str, Any]:
        step = state["turn_step"] + 1
        if step < steps_per_turn:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": TOOL_NAME,
                        "args": {"step": step},
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            msg = AIMessage(content=f"Done after {step} steps.")
        return {"messages": [msg], "turn_step": step}

    def tools(state: AgentState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        results = [
            ToolMessage(content="ok", name=call["name"], tool_call_id=call["id"])
            for call in last.tool_calls
        ]
        return {"messages": results}

    def route(state: AgentState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(AgentState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def _run_turns(graph: Any, thread_id: str, turns: int, steps_per_turn: int) -> int:
    """Run ``turns`` turns on ``thread_id``; return the model steps taken."""
    from langchain_core.messages import AIMessage, HumanMessage

    config = {"configurable": {"thread_id": thread_id}}
    steps = 0
    for i in range(turns):
        out = graph.invoke(
            {"messages": [HumanMessage(content=f"turn {i}: please do the thing")], "turn_step": 0},
            config,
            durability="sync",
        )
        taken = out["turn_step"]
        if taken != steps_per_turn or not isinstance(out["messages"][-1], AIMessage):
            raise RuntimeError(f"turn {i} ran {taken} steps, expected {steps_per_turn}")
        steps += taken
    return steps


def run_langgraph(turns: int, steps_per_turn: int = 3, *, db_path: str) -> dict[str, float]:
    """Time ``turns`` durable turns of a LangGraph agent loop on a file-backed SqliteSaver.

    One untimed warm-up turn runs first on its own thread_id in the same database; the timed
    turns then continue one conversation on a fresh thread_id, and only that thread's rows
    are counted.
    """
    if turns < 1 or steps_per_turn < 1:
        raise ValueError("turns and steps_per_turn must be >= 1")
    from langgraph.checkpoint.sqlite import SqliteSaver

    with closing(sqlite3.connect(db_path, check_same_thread=False)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        graph = _build_graph(steps_per_turn, saver)

        _run_turns(graph, f"warmup-{uuid.uuid4().hex}", 1, steps_per_turn)

        thread_id = f"bench-{uuid.uuid4().hex}"
        start = time.perf_counter()
        steps = _run_turns(graph, thread_id, turns, steps_per_turn)
        seconds = time.perf_counter() - start

        (checkpoints,) = conn.execute(
            "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        (write_rows,) = conn.execute(
            "SELECT COUNT(*) FROM writes WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        (sync_mode,) = conn.execute("PRAGMA synchronous").fetchone()
        if sync_mode != 2:  # 2 == FULL
            raise RuntimeError(f"connection lost synchronous=FULL (now {sync_mode})")

    return {
        "turns": float(turns),
        "steps": float(steps),
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "checkpoint_writes": float(checkpoints),
        "writes_per_step": checkpoints / steps,
        # Extra context: rows in the pending-writes table (one per channel write per task).
        "write_rows": float(write_rows),
    }


def run_langgraph_small(turns: int, window: int, *, db_path: str) -> dict[str, float]:
    """The small-state shape: turns/s over the first and the last ``window`` turns, and the
    process's CPU time per turn over each (user and system, all threads).

    The graph's state is a list of plain tuples (``Annotated[list, operator.add]``) and a
    counter; each turn is five supersteps (model, tool, model, tool, model) on one
    ``thread_id``, file ``SqliteSaver`` with WAL + ``synchronous=FULL``,
    ``invoke(..., durability="sync")``. The fastest honest configuration of LangGraph for this
    loop: nothing is serialised but tuples and an int.
    """
    import operator
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class Small(TypedDict):
        items: Annotated[list[tuple[str, str]], operator.add]
        step: int

    def model(state: Small) -> dict[str, Any]:
        step = state["step"] + 1
        if step < 3:
            return {"items": [("call", f"noop {step}")], "step": step}
        return {"items": [("answer", "done")], "step": step}

    def tool(state: Small) -> dict[str, Any]:
        return {"items": [("result", "ok")]}

    def route(state: Small) -> str:
        return "tool" if state["items"][-1][0] == "call" else END

    with closing(sqlite3.connect(db_path, check_same_thread=False)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        builder = StateGraph(Small)
        builder.add_node("model", model)
        builder.add_node("tool", tool)
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", route, ["tool", END])
        builder.add_edge("tool", "model")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"small-{uuid.uuid4().hex}"}}
        marks = [time.perf_counter()]
        cpu = {0: time.process_time()}
        for i in range(turns):
            out = graph.invoke(
                {"items": [("user", f"task {i}")], "step": 0}, config, durability="sync"
            )
            if out["step"] != 3:
                raise RuntimeError(f"turn {i} took {out['step']} model steps, expected 3")
            marks.append(time.perf_counter())
            if i + 1 in (window, turns - window, turns):
                cpu[i + 1] = time.process_time()
    return {
        "first_turns_per_s": window / (marks[window] - marks[0]),
        "last_turns_per_s": window / (marks[turns] - marks[turns - window]),
        "first_cpu_s_per_turn": (cpu[window] - cpu[0]) / window,
        "last_cpu_s_per_turn": (cpu[turns] - cpu[turns - window]) / window,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--steps-per-turn", type=int, default=3)
    parser.add_argument("--db", default=None, help="SQLite file (default: a temporary one)")
    args = parser.parse_args(argv)

    if args.db is not None:
        result = run_langgraph(args.turns, args.steps_per_turn, db_path=args.db)
    else:
        with tempfile.TemporaryDirectory(prefix="lg-baseline-") as tmp:
            db = str(Path(tmp) / "checkpoints.sqlite")
            result = run_langgraph(args.turns, args.steps_per_turn, db_path=db)
    print(json.dumps({"baseline": "langgraph+SqliteSaver", **langgraph_versions(), **result}))


if __name__ == "__main__":
    main()
