"""The configuration's schema refusals as one line (workflow/schemas/config.schema.yaml).

jsonschema's ValidationError prints the schema it failed against; the workflow says instead
the key, where it is set (the key path and the config file that sets it) and the closest
accepted key or value. Plain Python (jsonschema, yaml); docs/pipeline.md, "Configuration".
"""
from __future__ import annotations

import difflib
import json
import os

import jsonschema
import yaml

__all__ = ["config_error_line", "schema_refusal", "REGISTERED_VALUES"]


def _logger_kinds() -> list:
    from tdmpc2core.io.loggers import logger_kinds

    return logger_kinds()


#: key path -> the values it takes, for the keys whose values a library registry holds (the
#: schema types them as names and the configuration check refuses the others, naming these)
REGISTERED_VALUES = {("logger", "kind"): _logger_kinds}


def _schema_node(node, root):
    """A schema node with its $ref (local: #/...) followed."""
    while isinstance(node, dict) and "$ref" in node and node["$ref"].startswith("#/"):
        target = root
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _accepted_keys(node, root) -> set:
    """The property names a schema node accepts: its own `properties` and those of the
    schemas it references or combines with allOf."""
    node = _schema_node(node, root)
    keys = set((node or {}).get("properties") or {})
    for sub in (node or {}).get("allOf") or []:
        keys |= _accepted_keys(sub, root)
    return keys


def _sets(node, path: list, null: bool = False) -> bool:
    """Whether the configuration tree ``node`` (dicts and lists) sets the key path ``path``
    (list items by their index) to something other than null (``null``: or to null itself,
    for an error about a null value)."""
    for i, part in enumerate(path):
        if isinstance(node, dict):
            if null and i == len(path) - 1 and part in node:
                return True
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
        if node is None:
            return False
    return True


def _read_files(configfiles):
    """(path, its YAML) of each config file that can be read, in the order given."""
    for fp in configfiles:
        try:
            with open(fp) as fh:
                yield fp, yaml.safe_load(fh)
        except (OSError, yaml.YAMLError):
            continue


def _files_setting(path: list, configfiles: list, null: bool = False) -> list:
    """The config files in which the key path ``path`` is set (``null``: set to null counts),
    the one that wins first (``configfiles``: lowest priority first)."""
    found = []
    for fp, node in _read_files(reversed(configfiles)):
        if _sets(node, path, null):
            rel = os.path.relpath(fp)
            found.append(rel if not rel.startswith("..") else str(fp))
    return found


def _keys_beside(path: list, configfiles: list) -> list:
    """The keys the config files set beside the last key of ``path`` (its siblings: the task
    names of a protocol for ``protocols.P.tasks.NAME``), in file order, without repeats."""
    names: list = []
    for _, node in _read_files(configfiles):
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            names += [str(k) for k in node if str(k) != path[-1] and str(k) not in names]
    return names


def _inner_error(err: jsonschema.ValidationError, schema: dict):
    """The error under an unevaluatedProperties error whose keys are all accepted: a value one of
    the node's allOf schemas refused (e.g. ``agent.weight_decay: -1`` in a task), which left
    that schema's keys unevaluated. jsonschema's best match is the shallower unevaluatedProperties
    error; this is the value's, its path made absolute. None when there is none."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    found = [e for e in cls(schema).evolve(schema=err.schema).iter_errors(err.instance)
             if e.path or e.validator not in ("additionalProperties", "unevaluatedProperties")]
    best = jsonschema.exceptions.best_match(found)
    if best is None:
        return None
    root = best
    while root.parent is not None:
        root = root.parent
    root.path.extendleft(reversed(list(err.absolute_path)))
    return best


def _yaml_values(values) -> str:
    """An enum's values as a user writes them in YAML (``off, last, every, false``), not as
    Python's list repr (which shows YAML's false as ``False``)."""
    return ", ".join(json.dumps(v) if isinstance(v, bool) or v is None else str(v) for v in values)


def config_error_line(err: jsonschema.ValidationError, schema: dict, configfiles: list, overrides=None) -> str:
    """One line for a jsonschema ValidationError of the configuration: an unknown key with the
    file that sets it and the closest accepted key, a value outside an enum with the closest
    accepted one, else jsonschema's message; ``configfiles``: lowest priority first;
    ``overrides``: the ``--config`` values alone (Snakemake's ``config_settings.config``; they win
    over every file, so a key they set is said to be set by --config)."""
    path = [str(p) for p in err.absolute_path]
    where = ".".join(path) or "the top level"
    null = err.instance is None  # a key set to null: the file that sets it so
    cli = bool(path) and _sets(overrides or {}, path, null)
    if err.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(err.instance, dict):
        accepted = _accepted_keys(err.schema, schema)
        unknown = [k for k in err.instance if k not in accepted]
        inner = None if unknown else _inner_error(err, schema)
        if inner is not None:
            return config_error_line(inner, schema, configfiles, overrides)
        unknown = unknown or ["?"]
        key = unknown[0]
        files = _files_setting(path + [key], configfiles)
        src = f" (set in {files[0]})" if files else " (set by --config)"
        close = difflib.get_close_matches(str(key), sorted(accepted), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; accepted there: {', '.join(sorted(accepted))}"
        defs = schema.get("$defs", {})
        if not path and {"protocol", "settings"} <= set(defs):  # a protocol's or a task's key at the top level
            name = err.instance.get("protocol")
            proto = f"protocols.{name if isinstance(name, str) else '<protocol>'}"
            if key in _accepted_keys(defs["protocol"], schema):  # tasks:, multitask:, ...
                hint = f"; {key} is a protocol's key: write it under {proto}.{key} (the protocol `protocol` names)"
            elif key in _accepted_keys(defs["settings"], schema):  # eval_every:, agent:, ...
                hint = (f"; {key} is a task's setting: write it under {proto}.defaults.{key} (every task) or "
                        f"{proto}.tasks.<task>.{key}")
        more = f" (and {len(unknown) - 1} more unknown key(s))" if len(unknown) > 1 else ""
        return f"config: unknown key {key!r} in {where}{src}{hint}{more}"
    files = _files_setting(path, configfiles, null) if path and not cli else []
    src = " (set by --config)" if cli else f" (set in {files[0]})" if files else ""
    if err.validator == "enum" and isinstance(err.instance, list):
        return (f"config: {where}{src}: takes one value, not a list ({err.instance!r}); accepted: "
                f"{_yaml_values(err.validator_value)}")
    if err.validator == "type" and isinstance(err.instance, list) and tuple(path) in REGISTERED_VALUES:
        return (f"config: {where}{src}: takes one value, not a list ({err.instance!r}); accepted: "
                f"{REGISTERED_VALUES[tuple(path)]()}")
    if err.validator == "enum":
        values = list(err.validator_value)
        if err.instance is True and False in values:  # an unquoted on / yes / true
            how = "--config reads True as true" if cli else "YAML reads an unquoted on, yes or true as true"
            return f"config: {where}{src}: True is not accepted ({how}); accepted: {_yaml_values(values)}"
        read = _yaml_read(err.instance) if isinstance(err.instance, str) else None
        if isinstance(read, bool) and any(v is read for v in values):  # --config video=false, or a quoted 'false'
            how = "--config passes it as text" if cli else "quoted, it is text"
            return (f"config: {where}{src}: the text {err.instance!r} is not accepted ({how}, not YAML's "
                    f"{json.dumps(read)}); accepted: {', '.join(v for v in values if isinstance(v, str))}")
        spelled = {_yaml_values([v]).lower(): _yaml_values([v]) for v in values}  # as YAML writes them
        close = difflib.get_close_matches(str(err.instance).lower(), list(spelled), n=1)
        return f"config: {where}{src}: {err.instance!r} is not accepted" + (
            f"; did you mean {spelled[close[0]]!r}?" if close else f"; accepted: {_yaml_values(values)}")
    hint = ""
    if cli and err.validator == "type" and isinstance(err.instance, str) and path[-1].isdigit():
        hint = "; --config passes list items as strings: set this list in a file given with --configfile"
    elif err.validator == "type" and len(path) >= 2 and path[-2] == "agent" and path[-1] == "extensions":
        hint = "; extensions is a setting of the task (or of defaults or the multitask block), beside agent, not in it"
    elif err.validator == "type" and path and path[-1] == "logger" and isinstance(err.instance, str):
        hint = f"; write it as a block: logger: {{kind: {err.instance}}}"
    elif (err.validator == "type" and "array" in _as_list(err.validator_value)
          and (isinstance(err.instance, (int, float)) and not isinstance(err.instance, bool)
               or isinstance(err.instance, str) and not _is_number_text(err.instance))):
        hint = (f"; write a list of lists of seeds, e.g. [[{err.instance}]]" if path and path[-1] == "seed_groups"
                else f"; write a list: [{err.instance}]")
    elif err.validator == "type" and isinstance(err.instance, str) and _is_number_text(err.instance):
        if isinstance(yaml.safe_load(err.instance), (int, float)):  # a number the user quoted
            hint = f" (a quoted number is a string: write {err.instance} without quotes)"
        elif _as_list(err.validator_value) == ["integer"] and float(err.instance).is_integer():
            hint = f" (YAML reads {err.instance} as a string: write {int(float(err.instance))})"
        else:
            hint = (f" (YAML reads {err.instance} as a string: write it with a decimal point and a signed "
                    f"exponent, e.g. 3.0e-4)")
    elif (err.validator == "required" and len(path) == 4 and path[0] == "protocols" and path[2] == "tasks"
          and "'env_id'" in err.message):  # a task name misspelt in an override file: a new task, without env_id
        close = difflib.get_close_matches(path[3], _keys_beside(path, configfiles), n=1)
        hint = (f"; did you mean the task {close[0]!r}? (a task named anew needs its env_id)" if close
                else " (a task named anew needs its env_id)")
    elif err.validator == "type" and "enum" in err.schema:  # video: 1, video: null
        hint = f"; accepted: {_yaml_values(err.schema['enum'])}"
    return f"config: {where}{src}: {err.message}{hint}"


def _yaml_read(text: str):
    """``text`` as YAML reads it (``"false"`` -> False); the text itself when YAML cannot."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_number_text(text: str) -> bool:
    """A string that Python reads as a number (YAML 1.1 takes ``3e-4`` as a string)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def schema_refusal(exc: BaseException, schema_file: str, configfiles: list, overrides=None) -> str | None:
    """The one line for ``exc``, Snakemake's error from its ``validate`` raised while handling
    jsonschema's ValidationError (found as its cause or context); None when ``exc`` does not come
    from one (the caller re-raises it). ``schema_file``: the schema's path; ``overrides``: the
    ``--config`` settings."""
    err = exc.__cause__ or exc.__context__
    if not isinstance(err, jsonschema.ValidationError):
        return None
    with open(schema_file) as fh:
        schema = yaml.safe_load(fh)
    return config_error_line(err, schema, configfiles, overrides)
