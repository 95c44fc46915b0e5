"""``nb.evals``: evaluate agents from the log.

Datasets from the turns sessions recorded (``dataset``), replays of them against a changed
agent that never run a recorded side effect again (``replay``), scores by pydantic-evals'
evaluators and agentnb's (``ToolTrajectory``, ``NoUnrecordedCalls``, ``TokensBelow``,
``LatencyBelow``, ``SameAnswerAs``; ``judge_model`` for ``LLMJudge``), experiments as
dataframes (``Experiment.frame/summary/compare/diff/plot/to_parquet``) and a regression gate
(``assert_no_regression``). Needs the ``evals`` extra (``pip install -e ".[evals]"``).
See docs/evals.md.
"""

from __future__ import annotations

from agentnb.evals import _deps  # noqa: F401 - the install hint, before anything else
from agentnb.evals.cases import Dataset, EvalCase, dataset, load_dataset
from agentnb.evals.evaluators import (
    LatencyBelow,
    NoUnrecordedCalls,
    SameAnswerAs,
    Score,
    TokensBelow,
    ToolTrajectory,
    judge_model,
)
from agentnb.evals.experiment import DiffView, Experiment, assert_no_regression
from agentnb.evals.replay import CaseResult, UnrecordedCall, replay

__all__ = [
    "CaseResult",
    "Dataset",
    "DiffView",
    "EvalCase",
    "Experiment",
    "LatencyBelow",
    "NoUnrecordedCalls",
    "SameAnswerAs",
    "Score",
    "TokensBelow",
    "ToolTrajectory",
    "UnrecordedCall",
    "assert_no_regression",
    "dataset",
    "judge_model",
    "load_dataset",
    "replay",
]
