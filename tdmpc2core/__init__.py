"""tdmpc2core: faithful JAX/Flax/Optax TD-MPC2 (Hansen, Su, Wang, ICLR 2024).

The single-task agent reproduces the paper-era official code (nicklashansen/tdmpc2 at
5f6fade); ``TDMPC2MultiTask`` trains one agent offline on a pooled multi-task dataset, as
the paper's mt30/mt80 models; ``docs/deviations.md`` lists every departure. Importing this
package is cheap: environment suites are imported when an environment is made.
"""
from .model.config import MODEL_SIZES, TDMPC2Config
from .version import __version__


def __getattr__(name):  # lazy: importing the agent pulls in JAX-heavy modules
    if name in ("TDMPC2", "TerminationError", "NoSampleableEpisodeError"):
        from .agents import single_task as agent
        return getattr(agent, name)
    if name in ("TrainingInterrupted", "RunOptions"):
        from .run import driver
        return getattr(driver, name)
    if name == "LoggingConfig":
        from .io.loggers import LoggingConfig
        return LoggingConfig
    if name in ("evaluate_official", "load_official_checkpoint"):
        from .agents import official_eval
        return {"evaluate_official": official_eval.evaluate_official,
                "load_official_checkpoint": official_eval.load_checkpoint}[name]
    if name in ("TDMPC2MultiTask", "MultiTaskState"):
        from .agents import multitask
        return getattr(multitask, name)
    raise AttributeError(name)


__all__ = ["TDMPC2", "TDMPC2MultiTask", "MultiTaskState", "TDMPC2Config", "MODEL_SIZES", "TerminationError",
           "NoSampleableEpisodeError", "TrainingInterrupted", "RunOptions", "LoggingConfig", "evaluate_official", "load_official_checkpoint",
           "__version__"]
