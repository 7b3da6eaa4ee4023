"""`parley eval DATASET.yaml --agent NAME[@VERSION] [--baseline VERSION]`: run a dataset's cases
(sessions to replay, scripted conversations) as ordinary sessions tagged `eval`, in this process
(the engine runs as `parley serve` runs it, without serving MCP), as the `cli` operator; check
each case's assertions and compare with the baseline. Exit 0: no regression; 1: a regression
(without a baseline: a failing case); 2: a bad dataset or arguments. A rerun of the same command
reuses the sessions it started (see parley/runtime/evals/runner.py), so it resumes after a crash."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx2

from parley.cli_common import load_from_args
from parley.config import ServerConfig
from parley.errors import RequestError
from parley.runtime.access import session_starter
from parley.runtime.evals.dataset import Dataset, DatasetError, Judge, load_dataset
from parley.tls import http_client

if TYPE_CHECKING:  # the app and the runner import the whole engine: only once the command runs
    from parley.app import App
    from parley.runtime.evals.checks import Verdict
    from parley.runtime.evals.report import EvalReport


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRequest:
    """What the command was asked: the dataset (its path, text and model), the candidate, the
    baseline, how many cases run at once and how long each may take."""

    path: str
    text: str
    dataset: Dataset
    agent: str
    baseline: str | None = None
    concurrency: int = 4
    wait_s: float = 600.0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def add_eval_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    ev = sub.add_parser(
        "eval",
        help="run a dataset of cases on an agent version (beside a baseline); exit 1 on a regression",
    )
    ev.add_argument("dataset", help="the dataset (YAML): cases to replay or scripted, with expect:")
    ev.add_argument("--agent", required=True, help="NAME (as configured now) or NAME@VERSION (a stored one)")
    ev.add_argument(
        "--baseline", help="what to compare with: VERSION (of the same agent), NAME or NAME@VERSION"
    )
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.add_argument("--junit", metavar="PATH", help="also write the report as JUnit XML to PATH")
    ev.add_argument("--concurrency", type=_positive, default=4, help="cases run at once (4)")
    ev.add_argument(
        "--wait-seconds", type=float, default=600.0, help="how long each case's session may take (600)"
    )
    ev.set_defaults(func=run_eval)
    return ev


def run_eval(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    try:
        text = Path(args.dataset).read_text(encoding="utf-8")
        dataset = load_dataset(args.dataset, text, list(config.models))
    except OSError as exc:
        print(f"parley: cannot read the dataset {args.dataset}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except DatasetError as exc:
        print(f"parley: the dataset {args.dataset} cannot run:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    request = EvalRequest(
        path=args.dataset,
        text=text,
        dataset=dataset,
        agent=args.agent,
        baseline=args.baseline,
        concurrency=args.concurrency,
        wait_s=args.wait_seconds,
    )
    from parley.app import running_app
    from parley.runtime.evals.report import as_json, as_junit, render

    async def run() -> EvalReport | None:
        # A run of its own: it starts no schedule's sessions (the servers do).
        async with running_app(config, seams=getattr(args, "seams", None), schedules=False) as app:
            try:
                return await evaluate(app, config, request, getattr(args, "seams", None))
            except RequestError as exc:  # an agent or version that is not there: nothing ran
                print(f"parley: {exc}", file=sys.stderr)
                return None

    report = anyio.run(run)
    if report is None:
        return 2
    print(json.dumps(as_json(report), indent=2) if args.json else render(report))
    if args.junit:
        Path(args.junit).write_text(as_junit(report), encoding="utf-8")
    return report.exit_code


async def evaluate(app: App, config: ServerConfig, request: EvalRequest, seams: object = None) -> EvalReport:
    """Run the request's cases on the running `app` and report them."""
    from parley.app import ModelClients
    from parley.runtime.evals.judge import judge
    from parley.runtime.evals.report import EvalReport
    from parley.runtime.evals.runner import EvalRunner, JudgeFn

    async with http_client(timeout=httpx2.Timeout(30.0, read=300.0)) as http:
        models = ModelClients(http, getattr(seams, "model", None))

        async def ask(judged: Judge, sent: list[str], answer: str | None) -> Verdict:
            spec = config.models[judged.model]
            return await judge(models(spec, "the eval judge"), spec, judged.rubric, sent, answer)

        judge_fn: JudgeFn = ask
        runner = EvalRunner(
            service=app.service,
            store=app.store,
            caller=session_starter(getpass.getuser(), config.auth.mode),
            judge=judge_fn,
            dataset_text=request.text,
            wait_s=request.wait_s,
        )
        candidate = await runner.target(request.agent)
        baseline = None
        if request.baseline is not None:
            # NAME@VERSION, an agent's NAME (its live definition), or a VERSION of the candidate's agent.
            spec = request.baseline
            if "@" not in spec and spec not in config.agents:
                spec = f"{candidate.agent}@{spec}"
            baseline = await runner.target(spec)
        targets = [candidate] if baseline is None else [candidate, baseline]
        runs = await runner.run_all(request.dataset, targets, request.concurrency)
    return EvalReport.of(request.path, candidate, baseline, runs)
