"""The pipeline's logic (configuration, code versions, cluster resources, end-of-run hooks), called by the workflow's .smk files; imports no JAX and no Snakemake."""
