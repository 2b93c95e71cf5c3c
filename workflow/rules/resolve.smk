# The resolved configuration: the selected protocol with every task's settings merged.
# The later stages (tables, overview figure, report) read this one file.


rule resolve_config:
    """The configuration this run uses, as one YAML file the later stages read."""
    output:
        RESOLVED,
    log:
        "logs/resolve_config.log",
    conda:
        CONDA_ENV
    params:
        text=P.resolved_yaml,
        protocol=P.protocol_name,
        n_tasks=len(TASKS),
    # a shell job, not `run:`: Snakemake runs a `run:` job in a Python subprocess of its own,
    # which prints a KeyboardInterrupt traceback when a terminal's Ctrl-C reaches it
    shell:
        "printf '%s' {params.text:q} > {output:q}.tmp && mv -f {output:q}.tmp {output:q} && "
        "echo 'wrote {output} (protocol {params.protocol}, {params.n_tasks} tasks)' > {log:q}"
