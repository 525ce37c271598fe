"""ncu output as ``ncu --profile-from-start off ... --csv --print-units base`` prints it: its ``==PROF==`` lines, the
program's own output, then one CSV row per kernel launch and metric (the details page), with thousands separators.
"""

from __future__ import annotations

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def _rows(ident: int, kernel: str, block: str, grid: str, metrics: list[tuple[str, str, str]]) -> list[str]:
    return [
        f'"{ident}","48211","harness","127.0.0.1","{kernel}","1","13","{block}","{grid}","0","9.0",'
        f'"Command line profiler metrics","{name}","{unit}","{value}"'
        for name, unit, value in metrics
    ]


STALLS = [
    ("barrier", "0"),
    ("branch_resolving", "0.03"),
    ("dispatch_stall", "0.01"),
    ("drain", "0.02"),
    ("imc_miss", "0"),
    ("lg_throttle", "0.41"),
    ("long_scoreboard", "14.87"),
    ("math_pipe_throttle", "0.05"),
    ("membar", "0"),
    ("mio_throttle", "0.02"),
    ("misc", "0.01"),
    ("no_instruction", "0.36"),
    ("not_selected", "0.52"),
    ("selected", "1"),
    ("short_scoreboard", "0.08"),
    ("sleeping", "0"),
    ("tex_throttle", "0"),
    ("wait", "1.73"),
]

VADD = [
    ("gpu__time_duration.sum", "nsecond", "94,752"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "82.41"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "91.37"),
    ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "%", "44.12"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "17.80"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "0"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "0"),
    *((f"smsp__average_warps_issue_stalled_{name}_per_issue_active.ratio", "", value) for name, value in STALLS),
]

REDUCE = [
    ("gpu__time_duration.sum", "nsecond", "3,104"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "23.90"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "2.31"),
    ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "%", "6.02"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "9.75"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "1,536"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "512"),
    ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "6.40"),
    ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "2.10"),
    ("smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "", "1"),
    ("smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio", "", "n/a"),
]

ONE_KERNEL = (
    "\n".join(
        [
            "==PROF== Connected to process 48211 (/tmp/r1build-ncu-x1/harness)",
            '==PROF== Profiling "vadd_kernel" - 0: 0%....50%....100% - 9 passes',
            "==PROF== Disconnected from process 48211",
            HEADER,
            *_rows(0, "vadd_kernel", "(256, 1, 1)", "(65536, 1, 1)", VADD),
        ]
    )
    + "\n"
)
"""A memory-bound elementwise kernel, one launch per call."""

TWO_KERNELS = (
    "\n".join(
        [
            "==PROF== Connected to process 48377 (/tmp/r1build-ncu-x2/harness)",
            "a line the program printed",
            '==PROF== Profiling "partial_sums" - 0: 0%....50%....100% - 9 passes',
            '==PROF== Profiling "final_sum" - 1: 0%....50%....100% - 9 passes',
            "==PROF== Disconnected from process 48377",
            HEADER,
            *_rows(0, "(anonymous namespace)::partial_sums<256>", "(256, 1, 1)", "(528, 1, 1)", VADD),
            *_rows(1, "final_sum", "(1024, 1, 1)", "(1, 1, 1)", REDUCE),
        ]
    )
    + "\n"
)
"""A two-pass reduction: a long memory-bound pass, then a short latency-bound one with bank conflicts."""
