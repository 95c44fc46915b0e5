"""The ``agentnb`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import agentnb as nb


def _demo(args: argparse.Namespace) -> int:
    """Show the durable log working on the embedded default store."""
    store = nb.open_store(args.store)
    key = nb.SessionKey("default", "demo-user", "log-demo", "demo-001")
    store.create_session(key)
    log = nb.SessionLog(store, key)
    start = log.head()
    batch = [
        nb.Event.create("turn/start", {"input": "compare two plans"}, turn_id=f"turn_{start}"),
        nb.Event.create(
            "message/user",
            {"message": {"id": f"msg_{start}", "role": "user", "text": "compare two plans"}},
            turn_id=f"turn_{start}",
        ),
    ]
    committed = log.append(batch, expected_seq=start, batch_id=f"demo-{start}")
    print(f"committed seq {committed[0].seq}..{committed[-1].seq} to {store.url}")
    again = log.append(batch, expected_seq=start, batch_id=f"demo-{start}")
    print(f"retried the same batch: still seq {again[-1].seq}, head {log.head()} (no duplicate)")
    try:
        log.append(batch[:1], expected_seq=start, batch_id=f"demo-stale-{start}")
    except nb.AppendConflict as exc:
        print(f"a stale writer is refused: {type(exc).__name__}")
    store.close()
    reopened = nb.open_store(args.store)
    events = list(nb.SessionLog(reopened, key).scan())
    print(
        f"reopened the store: {len(events)} events, gapless = "
        f"{[e.seq for e in events] == list(range(1, len(events) + 1))}"
    )
    for event in events[-4:]:
        print(f"  {event.seq:>4}  {event.type:<14} turn={event.turn_id}")
    reopened.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentnb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the demo on the embedded default store",
        description="Run the demo. Example: agentnb demo --store sqlite:///.agentnb/demo.sqlite",
    )
    demo.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
