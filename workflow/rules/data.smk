# Raw structures -> the validated, split HDF5 dataset shared by every run that uses it.


rule demo_data:
    output:
        xyz="results/data/{dataset}/demo.xyz",
    log:
        "logs/demo_data/{dataset}.log",
    conda:
        "../envs/nepcore.yaml"
    params:
        args=demo_args,
    shell:
        "nepcore demo-data -o {output.xyz:q} {params.args} > {log:q} 2>&1"


rule convert:
    input:
        unpack(convert_inputs),
    output:
        h5="results/data/{dataset}/structures.h5",
    log:
        "logs/convert/{dataset}.log",
    benchmark:
        "logs/benchmarks/convert/{dataset}.tsv"
    conda:
        "../envs/nepcore.yaml"
    params:
        args=convert_args,
    shell:
        "nepcore convert {input.files:q} -o {output.h5:q} {params.args} > {log:q} 2>&1"
