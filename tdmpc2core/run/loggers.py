"""The loggers' older home: everything here is :mod:`tdmpc2core.io.loggers` (the logger kinds'
registry lives in ``io/`` so that the pipeline and the run driver read the same one)."""
from ..io.loggers import *  # noqa: F401,F403
from ..io.loggers import __all__, _import_extra, _json_safe  # noqa: F401
