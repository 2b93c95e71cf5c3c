# The resolved configuration: the selected protocol with every task's settings merged.
# The later stages (tables, overview figure, report) read this one file.


rule resolve_config:
    """The configuration this run uses, as one YAML file the later stages read."""
    output:
        RESOLVED,
    params:
        text=RESOLVED_YAML,
    log:
        "logs/resolve_config.log",
    run:
        import os

        tmp = output[0] + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(params.text)
        os.replace(tmp, output[0])
        with open(log[0], "w") as fh:
            fh.write(f"wrote {output[0]} (protocol {PROTOCOL_NAME}, {len(TASKS)} tasks)\n")
