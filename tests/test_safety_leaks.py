"""The smaller leaks of safety, each closed: unbounded live buffers, retention rules that
read garbage as a dry run, non-JSON numbers in tool arguments, export sinks that follow
links or delete folders not theirs, and task text that breaks out of a chart's script."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.export import DuckDBSink, Exporter, ParquetSink
from agentnb.models import Finish, ModelRequest, StreamItem, TextDelta, ToolCallDelta
from tests.runtime.helpers import WAIT, events_of


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[nb.Runtime]:
    agent = nb.Agent(name="a", agent_id="a", model=nb.ScriptedModel(["ok"] * 8))
    with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}") as rt:
        yield rt


class TestLiveBuffers:
    @pytest.mark.parametrize("maxsize", [0, -1, 1.5, "10", True, 10**7])
    def test_events_maxsize_must_bound_the_buffer(self, runtime: nb.Runtime, maxsize: Any) -> None:
        """events(maxsize=) of 0 or less (an unbounded queue) or not an int is InvalidInput."""
        with pytest.raises(InvalidInput, match="maxsize"):
            runtime.session("s").events(maxsize=maxsize)
        with pytest.raises(InvalidInput, match="maxsize"):
            runtime.all_events(maxsize=maxsize)

    def test_a_bounded_buffer_is_accepted(self, runtime: nb.Runtime) -> None:
        """A positive size subscribes as before."""
        runtime.session("s").events(maxsize=1).close()


class TestPruneArguments:
    @pytest.mark.parametrize("older_than", [float("nan"), float("inf"), -1])
    def test_older_than_must_be_finite_seconds(self, runtime: nb.Runtime, older_than: Any) -> None:
        """prune(older_than=NaN or infinity) is InvalidInput, not a rule matching nothing."""
        with pytest.raises(InvalidInput, match="older_than"):
            runtime.prune(older_than)

    @pytest.mark.parametrize("dry_run", ["no", "False", 0, None])
    def test_dry_run_must_be_a_bool(self, runtime: nb.Runtime, dry_run: Any) -> None:
        """prune(dry_run="no") is InvalidInput instead of silently being a dry run."""
        with pytest.raises(InvalidInput, match="dry_run"):
            runtime.prune(0, dry_run=dry_run)


class OneCall(nb.Model):
    """Calls ``echo`` with raw argument text once, then answers "done"."""

    name = "one-call"

    def __init__(self, arguments: str) -> None:
        self.arguments = arguments
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        if self.calls == 1:
            yield ToolCallDelta(index=0, call_id="c1", name="echo", arguments_delta=self.arguments)
            yield Finish("tool_calls")
        else:
            yield TextDelta("done")
            yield Finish("stop")


@nb.tool
def echo(x: Any = None) -> str:
    """Say it back."""
    return f"echo {x}"


class TestNonJsonNumbersInToolArguments:
    @pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
    def test_go_back_to_the_model_as_a_tool_error(self, tmp_path: Path, constant: str) -> None:
        """NaN or Infinity in a model's tool arguments is a tool error the model sees (as
        malformed JSON is), not a failed turn."""
        model = OneCall(f'{{"x": {constant}}}')
        agent = nb.Agent(name="n", agent_id="n", model=model, tools=[echo])
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'n.sqlite'}") as rt:
            session = rt.session("s")
            outcome = session.run("go", timeout=WAIT)
            result = events_of(session, "tool/result")[-1].payload
        assert outcome.status == "completed"
        assert result["status"] == "error"
        assert constant in result["output"]
        assert "not a JSON number" in result["output"]


def drained(tmp_path: Path, sink: Any, text: str = "hello", session: str = "s") -> None:
    """Run one task on a fresh store and export it into ``sink``."""
    agent = nb.Agent(name="x", agent_id="x", model=nb.ScriptedModel(["answer"]))
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    with nb.Runtime(agent, store=url) as rt:
        rt.session(session).run(text, timeout=WAIT)
        Exporter(rt.store, sink, progress=False).drain()


class TestDuckDBSinkLinks:
    def test_a_link_at_the_path_is_refused(self, tmp_path: Path) -> None:
        """A DuckDB sink does not follow a symbolic link at its path."""
        target = tmp_path / "someone-else.duckdb"
        drained(tmp_path, DuckDBSink(target))
        link = tmp_path / "export.duckdb"
        link.symlink_to(target)
        with pytest.raises(InvalidInput, match="symbolic link"):
            DuckDBSink(link)

    def test_a_link_put_in_place_later_is_not_written_through(self, tmp_path: Path) -> None:
        """A link created at the sink's path after it was made is refused at the write, and
        the file it points to is left as it was."""
        target = tmp_path / "someone-else.duckdb"
        drained(tmp_path, DuckDBSink(target))
        before = target.read_bytes()
        path = tmp_path / "export.duckdb"
        sink = DuckDBSink(path)
        path.symlink_to(target)
        with pytest.raises(InvalidInput, match="symbolic link"):
            drained(tmp_path / "other", sink, session="another")
        assert target.read_bytes() == before


class TestParquetStaging:
    def test_compact_deletes_only_the_sinks_own_staging_folders(self, tmp_path: Path) -> None:
        """compact() removes the staging folders of commits a crash cut off, and leaves any
        other folder under _staging/ alone."""
        root = tmp_path / "pq"
        sink = ParquetSink(root)
        drained(tmp_path, sink)
        mine = root / "_staging" / "batch_0123456789abcdef0123456789abcdef"
        mine.mkdir(parents=True)
        other = root / "_staging" / "notes"
        other.mkdir()
        (other / "keep.txt").write_text("mine")
        sink.compact()
        assert not mine.exists()
        assert (other / "keep.txt").read_text() == "mine"


class TestTimelineChartHtml:
    def test_task_text_cannot_close_the_script_element(self, tmp_path: Path) -> None:
        """A task whose text holds </script> cannot end the chart's script in to_html()."""
        from agentnb import analysis

        root = tmp_path / "pq"
        hostile = "</script><script>window.pwned = 1</script><!--"
        drained(tmp_path, ParquetSink(root), text=f"plan {hostile}")
        html = analysis.timeline_chart(str(root)).to_html()
        assert "<script>window.pwned" not in html
        assert "</script><script>" not in html
        assert html.count("</script>") == html.count("<script")
        assert "window.pwned = 1" in html  # the text is still there, inert
