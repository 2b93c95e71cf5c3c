"""The ``tdmpc2`` command: one sub-command per pipeline stage, and ``tdmpc2 envs`` (every
accepted env id, per suite).

Each stage lives in its own module under :mod:`tdmpc2core.stages` and exposes
``add_arguments(parser)`` and ``run(args) -> int``. Stages read files and write files
atomically; see ``docs/artifacts.md`` for the formats. Bad input (``ValueError``,
``FileNotFoundError``) ends a stage with one line ``tdmpc2 STAGE: error: ...`` and exit
status 1; set ``TDMPC2_TRACEBACK=1`` for the traceback. With ``JAX_COMPILATION_CACHE_DIR`` set
(the workflow's compiling jobs), :func:`tdmpc2core.run.jax_cache.install` runs first: a
damaged cache entry is moved aside so one recompile repairs it, and jaxlib's SIGILL lines on
programs loaded from the cache are explained once.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# MuJoCo picks its OpenGL backend once, when imported: a Linux machine without a display (a
# cluster node, CI, a container) renders the evaluation videos through EGL unless told otherwise
if sys.platform.startswith("linux") and not os.environ.get("MUJOCO_GL") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ["MUJOCO_GL"] = "egl"

from .run import jax_cache  # noqa: E402

# sub-command -> (module under tdmpc2core.stages, one-line help)
STAGES = {
    "train-single": ("train_single", "train single-task TD-MPC2 seeds (vmapped) on one task"),
    "dataset-task": ("dataset_task", "join the seeds' episode datasets of one task"),
    "dataset-pool": ("dataset_pool", "pool task datasets into one multi-task dataset"),
    "dataset-summary": ("dataset_summary", "per-episode summary of the datasets and their return figure"),
    "convert-official-data": ("convert_official_data", "convert the official mt30/mt80 dataset chunks (torch "
                              "files: trusted sources only, loading unpickles) into an episode Parquet pool"),
    "train-multi": ("train_multi", "train one multi-task TD-MPC2 model offline on a pooled dataset (seeds vmapped)"),
    "scaling": ("scaling", "the multi-task scaling table, per-task table and figure"),
    "figures": ("figures", "learning-curve figures per task, beside the published curves"),
    "tables": ("tables", "the paper's single-task tables and aggregate scores"),
    "report": ("report", "render results/report.html (self-contained)"),
    "evaluate-official": ("evaluate_official", "evaluate a released (official) TD-MPC2 checkpoint with our planner"),
    "official-table": ("official_table", "the released checkpoints' returns beside the published final scores"),
    "envs": ("envs", "list every accepted env id, per suite (not a pipeline stage)"),
}


def build_parser() -> argparse.ArgumentParser:
    # no abbreviated flags (a --seed taken silently as --seeds hides typos)
    parser = argparse.ArgumentParser(prog="tdmpc2", description="The tdmpc2 command: one sub-command per "
                                     "pipeline stage (file in, file out; docs/artifacts.md for the formats).",
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for name, (module, help_text) in STAGES.items():
        p = sub.add_parser(name, help=help_text, description=help_text[:1].upper() + help_text[1:] + ".",
                           allow_abbrev=False)
        p.set_defaults(_module=module, _parser=p)
        try:
            mod = importlib.import_module(f"tdmpc2core.stages.{module}")
        except ModuleNotFoundError as exc:  # a stage not built yet
            if exc.name != f"tdmpc2core.stages.{module}":
                raise
            p.set_defaults(_missing=True)
            continue
        mod.add_arguments(p)
    return parser


def _refuse_unknown_flags(parser: argparse.ArgumentParser, argv) -> None:
    """Exit with the chosen stage's own usage (status 2) when a ``--flag`` in ``argv`` is not
    one it takes, naming the closest flag it does take; checked before argparse parses, so a
    misspelt required flag (``--chekpoint``) is named as such, not reported as missing."""
    import difflib

    stages = parser._subparsers._group_actions[0].choices
    stage = next((a for a in argv if a in stages), None)
    if stage is None:  # no stage: a flag before it is not one of tdmpc2's own (-h only)
        unknown = [a for a in argv if a.startswith("-") and a not in ("-h", "--help")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)} (flags go after the stage; "
                         f"stages: {', '.join(stages)})")
        return
    sub = stages[stage]
    rest = argv[argv.index(stage) + 1:]
    unknown = [a for a in rest if a.startswith("--") and a != "--" and a.split("=")[0] not in sub._option_string_actions]
    if unknown:
        names = [n for n in sub._option_string_actions if n.startswith("--")]
        hints = []
        for flag in unknown:
            close = difflib.get_close_matches(flag.split("=")[0], names, n=1)
            hints.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
        sub.error(f"unrecognized arguments: {' '.join(hints)}")


def main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    _refuse_unknown_flags(parser, argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the stage's own parser, whose usage lists the flags it takes
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "_missing", False):
        parser.error(f"stage {args.stage!r} is not available in this version")
    mod = importlib.import_module(f"tdmpc2core.stages.{args._module}")
    # a job with the compilation cache on: damaged entries repaired, the SIGILL line explained
    jax_cache.install_if_enabled()
    try:
        rc = int(mod.run(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe raises here, not at the interpreter's exit
        return rc
    except (ValueError, FileNotFoundError) as e:  # bad input: one line (TDMPC2_TRACEBACK=1: the traceback)
        if os.environ.get("TDMPC2_TRACEBACK"):
            raise
        print(f"tdmpc2 {args.stage}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout went away (`tdmpc2 envs | head`): stop quietly
        # Python's documented way: point stdout at devnull so the exit's flush raises nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it


if __name__ == "__main__":
    sys.exit(main())
