# Validation of `config` against workflow/schemas/config.schema.yaml (Snakemake's validate,
# which also fills the schema's defaults). A refusal is one line: the key, where it is (the
# key path and the config file that sets it) and the closest accepted key, instead of the
# schema dump jsonschema prints (tdmpc2core/pipeline/schema.py).

import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

try:  # plain Python, no JAX: a login node validates. This checkout's when Snakemake's Python
    import tdmpc2core.pipeline  # lacks the package (e.g. with --use-conda: the jobs' env has it)
except ModuleNotFoundError as _e:
    if (_e.name or "").split(".")[0] != "tdmpc2core":
        raise
    sys.path.insert(0, workflow.basedir)
from tdmpc2core.pipeline.schema import schema_refusal

try:
    validate(config, "../schemas/config.schema.yaml")  # relative to this file
except WorkflowError as _e:
    # priority: the Snakefile's configfile (config.yaml), then each --configfile in the order given
    _cli = [str(f) for f in workflow.overwrite_configfiles or ()]
    _files = [str(f) for f in workflow.configfiles if str(f) not in _cli] + _cli
    _schema = os.path.join(
        workflow.basedir, "workflow", "schemas", "config.schema.yaml"
    )
    _line = schema_refusal(_e, _schema, _files, dict(workflow.config_settings.config))
    if _line is None:
        raise
    raise WorkflowError(_line) from None
