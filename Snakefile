# Train NEP4 interatomic potentials with nepcore (PyTorch) and write GPUMD nep.txt files.
#
#   snakemake --cores all --resources gpu=1          # the default run on the demo data
#
# Rules live in workflow/rules/; the config is documented in config/README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/summary.smk"


# every final artifact: the exported model, the evaluation and both stages of every member
rule all:
    default_target: True
    input:
        expand(rules.export.output, run=RUNS),
        expand(rules.evaluate.output, run=SINGLE_RUNS),
        expand(rules.evaluate_committee.output, run=COMMITTEE_RUNS),
        expand(rules.train_stage1.output, member=MEMBERS),
        expand(rules.train_stage2.output, member=MEMBERS),
