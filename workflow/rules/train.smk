# Descriptor scaling, then the two training stages of every member (seed) of every run.

import shlex


rule qscaler:
    input:
        h5=structures,
        nep_in=nep_in_input,
    output:
        json="results/{run}/model/qscaler.json",
    log:
        "logs/qscaler/{run}.log",
    benchmark:
        "logs/benchmarks/qscaler/{run}.tsv"
    conda:
        "../envs/nepcore.yaml"
    threads: 2
    params:
        args=qscaler_args,
    shell:
        "nepcore qscaler {input.h5:q} -o {output.json:q} {params.args} > {log:q} 2>&1"


rule train_stage1:
    input:
        h5=structures,
        qscaler=qscaler_of_member,
        finetune=finetune_input,
    output:
        ckpt="results/{member}/stage1/checkpoint.pt",
        nep="results/{member}/stage1/nep.txt",
        nep_best="results/{member}/stage1/nep_best.txt",
        loss="results/{member}/stage1/loss.out",
        status="results/{member}/stage1/status.json",
    log:
        "logs/train_stage1/{member}.log",
    benchmark:
        "logs/benchmarks/train_stage1/{member}.tsv"
    conda:
        "../envs/nepcore.yaml"
    threads: 4
    resources:
        gpu=train_gpus,
    params:
        launcher=train_launcher,
        stage=1,
        init="",
        out_dir=subpath(output.ckpt, parent=True),
        args=stage_args(1),
    shell:
        "{params.launcher} train --stage {params.stage} --data {input.h5:q} --qscaler {input.qscaler:q}"
        " {params.init} --out-dir {params.out_dir:q} {params.args} --restart-on-mismatch > {log:q} 2>&1"


# stage 2 starts from the stage-1 checkpoint with its own (energy-focused) settings
use rule train_stage1 as train_stage2 with:
    input:
        h5=structures,
        qscaler=qscaler_of_member,
        init="results/{member}/stage1/checkpoint.pt",
    output:
        ckpt="results/{member}/stage2/checkpoint.pt",
        nep="results/{member}/stage2/nep.txt",
        nep_best="results/{member}/stage2/nep_best.txt",
        loss="results/{member}/stage2/loss.out",
        status="results/{member}/stage2/status.json",
    log:
        "logs/train_stage2/{member}.log",
    benchmark:
        "logs/benchmarks/train_stage2/{member}.tsv"
    params:
        stage=2,
        init=lambda wildcards, input: f"--init {shlex.quote(input.init)}",
        out_dir=subpath(output.ckpt, parent=True),
        args=stage_args(2),
