"""Tables and plots made from run files only (config.json + rounds.jsonl), never from in-memory state.

Per seed, the checkpoint with the lowest evaluation loss gives loss, perplexity and entropy (the paper's rule),
and beside it the mean of the last ten rounds (how the run ends). Entries are the mean and sample standard
deviation over seeds. Every table carries its references: ``Clean`` (FedAvg with no attacker), ``Oracle``
(FedAvg over the round's benign clients only, which reads the ground truth) and, for perplexity, the unigram
model of the evaluation set. Comparisons between methods are paired by seed. The report refuses to mix runs
made by different code unless asked to.

Modules, in reading order: ``stats`` (numbers from records and values), ``load`` (run folders into summaries,
and the code that made them), ``compare`` (statistics per setting, paired by seed), ``tables`` and ``markdown``
(the tables), ``plots`` (the figures) and ``write`` (:func:`write_report`: all of them into one folder).
"""

from .compare import attack_matrix, clean_cost_rows, paired_rows, recovery_rows
from .load import MixedCodeError, check_same_code, load_runs, machine_text
from .tables import fraction_tables, to_latex, to_markdown
from .write import write_report

__all__ = [
    "MixedCodeError",
    "attack_matrix",
    "check_same_code",
    "clean_cost_rows",
    "fraction_tables",
    "load_runs",
    "machine_text",
    "paired_rows",
    "recovery_rows",
    "to_latex",
    "to_markdown",
    "write_report",
]
