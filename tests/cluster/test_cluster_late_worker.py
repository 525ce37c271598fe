"""A worker that joins after a resolve surveyed the cluster gets work from Dask all the same: every task carries the
resolving machine's facts (r1build version, code, nvcc) and the worker refuses one it does not share."""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any

import pytest

from r1build.cluster.facts import process_facts
from r1build.cluster.tasks import compile_verdict, evaluate_job, refuse_other
from r1build.errors import ClusterRefusedError

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def test_a_worker_refuses_a_task_from_other_code_or_another_nvcc() -> None:
    here = process_facts(with_gpus=False)
    refuse_other(here)  # the same r1build and nvcc: nothing to say
    refuse_other(None)  # nothing asked (an older resolving machine)
    with pytest.raises(ClusterRefusedError, match=r"runs r1build .*joined the cluster after this resolve"):
        refuse_other(replace(here, code="0" * 16))
    with pytest.raises(ClusterRefusedError, match="compiles with nvcc"):
        refuse_other(replace(here, toolchain="cuda_0.0.r0.0/compiler.0_0"))


def test_both_tasks_ask_before_they_do_anything() -> None:
    other = replace(process_facts(with_gpus=False), version="0.0.0")
    nothing: Any = None  # never looked at: the task refuses first
    with pytest.raises(ClusterRefusedError, match="runs r1build"):
        evaluate_job(nothing, nothing, [], {}, "tag", "session", expected=other)
    with pytest.raises(ClusterRefusedError, match="runs r1build"):
        compile_verdict(nothing, nothing, "sm_90", nothing, 1.0, expected=other)
