# Metrics, GPUMD-format *_test.out files and plots of the chosen model; then the export.


rule evaluate:
    input:
        model=chosen_model,
        h5=structures,
        loss1="results/{run}/stage1/loss.out",
        loss2="results/{run}/stage2/loss.out",
        status1="results/{run}/stage1/status.json",
        committee=committee_models,
    output:
        metrics=report(
            "results/{run}/eval/metrics.json",
            caption="../report/metrics.rst",
            category="{run}",
            subcategory="Evaluation",
            labels={"run": "{run}", "item": "metrics"},
        ),
        energy="results/{run}/eval/energy_test.out",
        force="results/{run}/eval/force_test.out",
        virial="results/{run}/eval/virial_test.out",
        stress="results/{run}/eval/stress_test.out",
        parity=report(
            "results/{run}/eval/parity.png",
            caption="../report/parity.rst",
            category="{run}",
            subcategory="Evaluation",
            labels={"run": "{run}", "item": "parity plot"},
        ),
        loss=report(
            "results/{run}/eval/loss.png",
            caption="../report/loss.rst",
            category="{run}",
            subcategory="Training",
            labels={"run": "{run}", "item": "loss curves"},
        ),
    log:
        "logs/evaluate/{run}.log",
    benchmark:
        "logs/benchmarks/evaluate/{run}.tsv"
    wildcard_constraints:
        run=alternatives(SINGLE_RUNS),
    conda:
        "../envs/nepcore.yaml"
    threads: 2
    params:
        out_dir=subpath(output.metrics, parent=True),
        committee=committee_args,
    shell:
        "nepcore evaluate --model {input.model:q} --data {input.h5:q} --out-dir {params.out_dir:q}"
        " --loss {input.loss1:q} {input.loss2:q} --stage1-status {input.status1:q} {params.committee} > {log:q} 2>&1"


# a run with several seeds: the same evaluation, plus the committee's disagreement per structure
use rule evaluate as evaluate_committee with:
    output:
        **rules.evaluate.output,
        committee="results/{run}/eval/committee.csv",
    wildcard_constraints:
        run=alternatives(COMMITTEE_RUNS),


rule export:
    input:
        model=chosen_model,
        h5=structures,
    output:
        nep=report(
            "results/{run}/nep.txt",
            caption="../report/nep.rst",
            category="{run}",
            subcategory="Model",
            labels={"run": "{run}", "item": "nep.txt"},
        ),
    log:
        "logs/export/{run}.log",
    conda:
        "../envs/nepcore.yaml"
    shell:
        "nepcore export --model {input.model:q} --data {input.h5:q} -o {output.nep:q} > {log:q} 2>&1"
