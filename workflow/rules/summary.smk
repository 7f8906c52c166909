# At the end of a run (success or error): the warnings the jobs wrote to their logs, which
# the console would otherwise never show (e.g. an empty test split, unknown nep.in keywords,
# a training split without forces).

import time

from nepcore.workflow import warnings_in_logs

#: when this snakemake started; logs older than this belong to earlier runs
WORKFLOW_START = time.time()


def print_log_warnings() -> None:
    found = warnings_in_logs("logs", WORKFLOW_START)
    if found:
        logger.warning(
            f"Warnings in the logs of this run ({len(found)}):\n"
            + "\n".join(f"    {line}" for line in found)
        )


onsuccess:
    print_log_warnings()


onerror:
    print_log_warnings()
