"""An experiment: the replay of a dataset by one agent, its scores, as dataframes.

``frame()`` has one row per case (input, recorded output, new output, each score, tokens,
latency, unrecorded calls); ``summary()`` one row per evaluator; ``compare(other)`` pairs the
cases of two experiments per evaluator (wins, losses, ties, the mean difference with a
bootstrap 95% interval); ``diff(case)`` shows two transcripts and tool trajectories side by
side, differences marked (HTML, every text escaped); ``plot()`` draws the scores
(matplotlib); ``to_parquet(dir)`` writes ``experiments``, ``experiment_cases`` and
``scores`` files. ``assert_no_regression`` is the gate for notebooks and pytest.
"""

from __future__ import annotations

import difflib
import html
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentnb.errors import EvalRegression, InvalidInput
from agentnb.evals.cases import EvalCase
from agentnb.evals.evaluators import Score
from agentnb.events import canonical_json

if TYPE_CHECKING:
    import pandas as pd

    from agentnb.stores.base import SessionStore

__all__ = ["CaseResult", "DiffView", "Experiment", "assert_no_regression"]

BOOTSTRAP_SAMPLES = 2000
"""Resamples of the paired differences behind ``compare``'s 95% interval."""


@dataclass(frozen=True)
class CaseResult:
    """One case of an experiment: the recorded turn, its replay and the scores."""

    case: EvalCase
    replayed: EvalCase | None
    """The replay's turn, read back from its log (None when it could not run)."""
    status: str
    """The replayed turn's status, or ``error`` when the replay itself failed."""
    error: str | None
    unrecorded_calls: int
    unanswered_requests: int
    scores: tuple[Score, ...] = ()
    session_id: str = ""
    seconds: float = 0.0

    @property
    def output(self) -> str | None:
        """The replay's answer."""
        return None if self.replayed is None else self.replayed.output


@dataclass(frozen=True, eq=False)
class Experiment:
    """The replay of a dataset by one agent (what ``nb.evals.replay`` returns)."""

    name: str
    results: tuple[CaseResult, ...]
    evaluators: tuple[str, ...]
    agent_name: str
    store: SessionStore | None = field(default=None, repr=False)
    """Where the replays are recorded (namespace ``evals/<name>``)."""
    namespace: str = ""
    tools: Mapping[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0

    def __repr__(self) -> str:
        return f"Experiment({self.name!r}, {len(self.results)} cases, agent {self.agent_name!r})"

    def __len__(self) -> int:
        return len(self.results)

    def result(self, case: str | EvalCase | CaseResult) -> CaseResult:
        """The result of one case (by name, ``EvalCase`` or ``CaseResult``)."""
        name = case if isinstance(case, str) else getattr(case, "name", None)
        if isinstance(case, CaseResult):
            name = case.case.name
        for r in self.results:
            if r.case.name == name:
                return r
        raise InvalidInput(f"no case {name!r} in experiment {self.name!r}")

    def outputs(self) -> dict[str, str | None]:
        """Case name -> the replay's answer."""
        return {r.case.name: r.output for r in self.results}

    def score_names(self) -> list[str]:
        """The score columns, in the order the evaluators gave them."""
        seen: dict[str, None] = {}
        for r in self.results:
            for s in r.scores:
                seen.setdefault(s.name, None)
        return list(seen)

    def scores(self, name: str) -> dict[str, float | None]:
        """Case name -> the numeric value of score ``name`` (booleans 1/0; None if absent)."""
        out: dict[str, float | None] = {}
        for r in self.results:
            out[r.case.name] = next((s.number for s in r.scores if s.name == name), None)
        return out

    # -- dataframes ------------------------------------------------------------------------

    def frame(self) -> pd.DataFrame:
        """One row per case: ids, input, recorded and new output, status, each score, usage,
        latency, unrecorded calls and unanswered requests."""
        import pandas as pd

        names = self.score_names()
        rows = []
        for r in self.results:
            new = r.replayed
            row: dict[str, Any] = {
                "experiment": self.name,
                "case": r.case.name,
                "session_id": r.case.session_id,
                "input": r.case.input,
                "recorded_output": r.case.output,
                "expected_output": r.case.expected_output,
                "output": r.output,
                "status": r.status,
                "error": r.error,
                "recorded_tools": canonical_json(r.case.tool_names),
                "tools": canonical_json([] if new is None else new.tool_names),
                "input_tokens": None if new is None else new.input_tokens,
                "output_tokens": None if new is None else new.output_tokens,
                "recorded_tokens": r.case.input_tokens + r.case.output_tokens,
                "latency_ms": None if new is None else new.latency_ms,
                "recorded_latency_ms": r.case.latency_ms,
                "unrecorded_calls": r.unrecorded_calls,
                "unanswered_requests": r.unanswered_requests,
                "agent_fingerprint": None if new is None else new.agent_fingerprint,
            }
            for n in names:
                found = next((s for s in r.scores if s.name == n), None)
                row[n] = None if found is None else found.value
            rows.append(row)
        frame = pd.DataFrame(rows)
        for col in ("input_tokens", "output_tokens", "recorded_tokens"):
            frame[col] = frame[col].astype("Int64")
        for col in ("latency_ms", "recorded_latency_ms"):
            frame[col] = frame[col].astype("Float64")
        return frame

    def summary(self) -> pd.DataFrame:
        """One row per score: cases scored, mean (booleans: the pass rate), min, max, and
        failures (an evaluator that raised); then the unrecorded calls and tokens in total."""
        import pandas as pd

        rows = []
        for n in self.score_names():
            values = list(self.scores(n).values())
            numbers = [v for v in values if v is not None]
            failed = sum(
                1 for r in self.results for s in r.scores if s.name == n and s.value is None
            )
            rows.append(
                {
                    "score": n,
                    "cases": len(numbers),
                    "mean": sum(numbers) / len(numbers) if numbers else None,
                    "min": min(numbers) if numbers else None,
                    "max": max(numbers) if numbers else None,
                    "failures": failed,
                }
            )
        frame = pd.DataFrame(rows, columns=["score", "cases", "mean", "min", "max", "failures"])
        frame.attrs["experiment"] = self.name
        frame.attrs["unrecorded_calls"] = sum(r.unrecorded_calls for r in self.results)
        frame.attrs["errors"] = sum(1 for r in self.results if r.status == "error")
        return frame

    def compare(
        self, other: Experiment, *, score: str | None = None, seed: int = 0
    ) -> pd.DataFrame:
        """This experiment against ``other``, paired by case, one row per score both have
        (or just ``score``): ``cases`` paired, ``wins`` (this one higher), ``losses``, ``ties``,
        ``mean_diff`` (this minus other) and its bootstrap 95% interval ``ci_low`` /
        ``ci_high`` (``BOOTSTRAP_SAMPLES`` resamples, seeded: the same numbers each call)."""
        import pandas as pd

        if not isinstance(other, Experiment):
            raise InvalidInput(f"compare takes another Experiment, got {type(other).__name__}")
        names = [n for n in self.score_names() if n in set(other.score_names())]
        if score is not None:
            if score not in names:
                raise InvalidInput(f"both experiments need score {score!r}; they share {names}")
            names = [score]
        rows = []
        for n in names:
            ours, theirs = self.scores(n), other.scores(n)
            diffs = [
                ours[c] - theirs[c]  # type: ignore[operator]
                for c in ours
                if ours[c] is not None and theirs.get(c) is not None
            ]
            low, high = bootstrap_interval(diffs, seed=seed)
            rows.append(
                {
                    "score": n,
                    "cases": len(diffs),
                    "wins": sum(1 for d in diffs if d > 0),
                    "losses": sum(1 for d in diffs if d < 0),
                    "ties": sum(1 for d in diffs if d == 0),
                    "mean_diff": sum(diffs) / len(diffs) if diffs else None,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
        frame = pd.DataFrame(
            rows,
            columns=["score", "cases", "wins", "losses", "ties", "mean_diff", "ci_low", "ci_high"],
        )
        frame.attrs.update(experiment=self.name, baseline=other.name)
        return frame

    def diff(self, case: str | EvalCase | CaseResult, other: Experiment | None = None) -> DiffView:
        """One case side by side: the recorded turn (or ``other``'s replay of it) and this
        replay, each with its input, tool trajectory and answer; lines that differ marked."""
        ours = self.result(case)
        left: EvalCase | None
        if other is None:
            left_title, left = "recorded", ours.case
        else:
            left_title, left = f"experiment {other.name}", other.result(ours.case.name).replayed
        return DiffView(
            ours.case.name,
            left_title,
            _transcript(left),
            f"experiment {self.name}",
            _transcript(ours.replayed),
            ours.scores,
        )

    def plot(self, *others: Experiment, ax: Any = None) -> Any:
        """A bar chart of each score's mean, this experiment beside ``others``; returns the
        matplotlib Axes."""
        import matplotlib.pyplot as plt

        experiments = [self, *others]
        names = self.score_names()
        if ax is None:
            _, ax = plt.subplots(figsize=(max(4.0, 1.6 * max(1, len(names))), 3.2))
        width = 0.8 / len(experiments)
        for i, exp in enumerate(experiments):
            means = []
            for n in names:
                values = [v for v in exp.scores(n).values() if v is not None]
                means.append(sum(values) / len(values) if values else 0.0)
            xs = [j + i * width for j in range(len(names))]
            ax.bar(xs, means, width=width, label=exp.name)
        ax.set_xticks([j + width * (len(experiments) - 1) / 2 for j in range(len(names))])
        ax.set_xticklabels(names, rotation=20, ha="right")
        ax.set_ylabel("mean score")
        ax.set_title("scores by experiment")
        ax.legend(fontsize="small")
        return ax

    def to_parquet(self, directory: str | Path) -> Path:
        """Write ``experiments.parquet`` (one row), ``experiment_cases.parquet`` (``frame()``
        with the scores left out) and ``scores.parquet`` (one row per case and score) into
        ``directory``, replacing this experiment's earlier files there."""
        import pandas as pd

        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        names = self.score_names()
        cases = self.frame().drop(columns=names)
        scores = pd.DataFrame(
            [
                {
                    "experiment": self.name,
                    "case": r.case.name,
                    "score": s.name,
                    "evaluator": s.evaluator,
                    "value": s.number,
                    "label": s.value if isinstance(s.value, str) else None,
                    "reason": s.reason,
                }
                for r in self.results
                for s in r.scores
            ],
            columns=["experiment", "case", "score", "evaluator", "value", "label", "reason"],
        )
        meta = pd.DataFrame(
            [
                {
                    "experiment": self.name,
                    "agent": self.agent_name,
                    "namespace": self.namespace,
                    "cases": len(self.results),
                    "evaluators": canonical_json(list(self.evaluators)),
                    "tools": canonical_json(dict(self.tools)),
                    "started_at": datetime.fromtimestamp(self.started_at, UTC),
                    "ended_at": datetime.fromtimestamp(self.ended_at, UTC),
                    "unrecorded_calls": sum(r.unrecorded_calls for r in self.results),
                }
            ]
        )
        for frame, file in (
            (meta, "experiments"),
            (cases, "experiment_cases"),
            (scores, "scores"),
        ):
            frame.to_parquet(root / f"{file}-{self.name}.parquet", index=False)
        return root


def bootstrap_interval(
    diffs: Sequence[float], *, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES
) -> tuple[float | None, float | None]:
    """The 2.5th and 97.5th percentiles of the mean of ``diffs`` resampled with replacement."""
    if not diffs:
        return None, None
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(samples))
    return means[int(0.025 * samples)], means[min(samples - 1, math.ceil(0.975 * samples) - 1)]


# -- the diff view ------------------------------------------------------------------------------


def _transcript(case: EvalCase | None) -> list[str]:
    """The turn as lines: input, given material, each tool call with its result, answer."""
    if case is None:
        return ["(no replay: the case did not run)"]
    lines = [f"user: {case.input}"]
    lines += [f"{g['kind']}: {g['text']}" for g in case.inputs]
    for call in case.tool_calls:
        lines.append(f"tool {call['name']}({canonical_json(call['arguments'])})")
        lines.append(f"  -> [{call['status']}] {call['output']}")
    lines += [f"answered {a['kind']}: {canonical_json(a['answer'])}" for a in case.answers]
    lines.append(f"assistant: {case.output if case.output is not None else '(no answer)'}")
    return lines


@dataclass(frozen=True)
class DiffView:
    """Two versions of one case side by side; shows as HTML in a notebook (``html``)."""

    case: str
    left_title: str
    left: list[str]
    right_title: str
    right: list[str]
    scores: Sequence[Any] = ()

    @property
    def html(self) -> str:
        """The table: lines present on one side only are marked (class ``changed``)."""
        e = html.escape
        rows = []
        matcher = difflib.SequenceMatcher(a=self.left, b=self.right, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            lefts, rights = self.left[i1:i2], self.right[j1:j2]
            for k in range(max(len(lefts), len(rights))):
                a = lefts[k] if k < len(lefts) else ""
                b = rights[k] if k < len(rights) else ""
                mark = "" if tag == "equal" else ' class="changed"'
                rows.append(f"<tr{mark}><td><pre>{e(a)}</pre></td><td><pre>{e(b)}</pre></td></tr>")
        scores = "".join(
            f"<li>{e(s.name)}: {e(str(s.value))}{' — ' + e(s.reason) if s.reason else ''}</li>"
            for s in self.scores
        )
        return (
            '<div class="agentnb-diff"><style>.agentnb-diff tr.changed td'
            "{background:#fff3cd}.agentnb-diff pre{margin:0;white-space:pre-wrap}</style>"
            f"<p><b>case {e(self.case)}</b></p><table><thead><tr><th>{e(self.left_title)}</th>"
            f"<th>{e(self.right_title)}</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + (f"<ul>{scores}</ul>" if scores else "")
            + "</div>"
        )

    @property
    def changed(self) -> bool:
        """Whether the two sides differ at all."""
        return self.left != self.right

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        out = difflib.unified_diff(
            self.left, self.right, self.left_title, self.right_title, lineterm=""
        )
        return "\n".join(out) or "(no differences)"


# -- the gate -------------------------------------------------------------------------------------


def assert_no_regression(
    experiment: Experiment,
    baseline: Experiment,
    *,
    evaluator: str | None = None,
    tolerance: float = 0.0,
) -> None:
    """Raise ``EvalRegression`` when a case scores lower than in ``baseline`` by more than
    ``tolerance`` (for ``evaluator``, or every score both have); its message holds a table of
    those cases (case, score, baseline, now, input). Returns None when nothing got worse."""
    if not isinstance(experiment, Experiment) or not isinstance(baseline, Experiment):
        raise InvalidInput("assert_no_regression takes two Experiments (experiment, baseline)")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0:
        raise InvalidInput(f"tolerance must be a number >= 0, got {tolerance!r}")
    shared = [n for n in experiment.score_names() if n in set(baseline.score_names())]
    if evaluator is not None:
        if evaluator not in shared:
            raise InvalidInput(f"both experiments need score {evaluator!r}; they share {shared}")
        shared = [evaluator]
    if not shared:
        raise InvalidInput("the experiments share no score to compare; give both evaluators")
    worse = []
    for n in shared:
        ours, theirs = experiment.scores(n), baseline.scores(n)
        for case, before in theirs.items():
            now = ours.get(case)
            if before is not None and (now is None or now < before - tolerance):
                worse.append((case, n, before, now, experiment.result(case).case.input))
    if not worse:
        return
    lines = [f"{'case':<40} {'score':<20} {'baseline':>8} {'now':>8}  input"]
    for case, n, before, now, text in worse:
        shown = "-" if now is None else f"{now:.3g}"
        lines.append(f"{case:<40} {n:<20} {before:>8.3g} {shown:>8}  {text[:60]!r}")
    raise EvalRegression(
        f"{len(worse)} case(s) of experiment {experiment.name!r} scored lower than in "
        f"{baseline.name!r} (tolerance {tolerance}):\n"
        + "\n".join(lines)
        + "\nLook at them with experiment.diff(case, baseline)",
        cases=[w[0] for w in worse],
    )
