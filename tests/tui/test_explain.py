"""`memsight explain LOG|-` on real vLLM startup logs (tests/data/vllm_logs, sources in its SOURCES.md): the
accuracy of the pool predicted from the config alone, asserted against the targets the README states, and the
command itself end to end (real `python -m tui.cli explain` processes).

The prediction uses none of the figures the log measured (weights, activation, non-torch, graphs, pool): only
the model, the GPU (its recorded mem_get_info total) and the engine settings. Each Case says what the log does
not (as flags), why the prediction differs, and which empirical constant was fitted on it, if any; the
README's table is generated from the same run (test_readme_table_is_the_one_the_cases_produce).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import pathlib
import statistics
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.conftest import REPO_ROOT
from tui import cmd_explain

LOGS = REPO_ROOT / "tests" / "data" / "vllm_logs"
WORKSHEET = "vLLM: predicted KV pool "
ROW_KEYS = {
    "device_total", "requested", "weights", "activation", "non_torch", "cudagraphs", "kv_pool", "num_blocks",
    "kv_tokens", "max_concurrency",
}  # fmt: skip


def explain(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "explain", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def explain_json(*args: str) -> dict:
    done = explain(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


V19 = "llmdplanner_v0.19.0_h100_"  # llm-d-planner's vLLM 0.19.0 sweep on H100s (SOURCES.md)
H100 = ("--gpu", "h100")  # the sweep ran on H100 80GB (SOURCES.md): sm 9.0, 132 SMs; total logged
DL = "dennislee_v0.10.1.1_"  # dennislee22/vLLM-benchmarking's vLLM 0.10.1.1 logs (SOURCES.md)
A100 = ("--gpu", "a100-80gb")  # its file names and README: A100 80GB (sm 8.0, 108 SMs); no total logged


@dataclass(frozen=True)
class Case:
    log: str
    args: tuple[str, ...]  # what the log does not say, given as flags
    version: str
    row: str  # "kv_pool", or "num_blocks" / "kv_tokens" where the log gives no pool
    label: str  # the README table's first column
    vllm: str  # the README table's vLLM column (how the version is known)
    why: str  # the difference and its cause, in words (the README table's last column)
    # the empirical constant of the prediction that was fitted on this very log ("" = held out: nothing the
    # prediction uses came from this log), so the table can say how well it does on logs it never saw
    fitted: str = ""
    # for a miss (|error| > 3%): words explain's own output says about its cause (a note or the row's cause)
    explain_says: str = ""


L4 = ("--gpu", "l4")  # the akamas study's L4s: 22.05 GiB (the table's total, vLLM's CI L4s); sm 8.9, 58 SMs
AKAMAS = ("--model", "gpt-oss-20b", *L4, "--gpu-memory-utilization", "0.85")  # k8s/smoke_test.sh at 63f222e
V19_FIT = "non-torch and the per-graph size of 0.18-0.26 (fitted on this H100 sweep)"

CASES = (
    Case("myoceane_v0.19.0_gpt-oss-20b_a100.log", ("--gpu", "a100-80gb"), "0.19.0", "kv_pool",
         "gpt-oss-20b, A100 80GB, blog", "0.19.0",
         "within 3%; weights -0.4% (MXFP4 experts padded for the A100's Marlin kernel, +0.85 GiB); the "
         "sampler "
         "is 0.17+'s Triton top-k/top-p; activation and non-torch are not in this log"),
    Case("pr10511_v0.6.5dev_llama3-8b_h100_tp1.log",
         ("--model", "tests/data/vllm_logs/configs/Meta-Llama-3-8B.json", "--vllm-version", "0.6.5", *H100),
         "0.6.5", "kv_pool", "Meta-Llama-3-8B, H100, vllm PR #10511", "0.6.5 dev",
         "non-torch: this development build logged 1.79 GiB (3.58 at TP=2); released 0.6.5 counts only the "
         "growth after its baseline (0.14 GiB predicted: an H100's local memory) and the build's commit is "
         "not readable here", explain_says="a development build wrote this log"),
    Case("issue10360_v0.6.4.post1_qwen25-32b-awq_a6000.log",
         ("--model", "qwen2.5-32b", "-q", "awq", "--vllm-version", "0.6.4", "--max-model-len", "4096"),
         "0.6.4", "kv_pool", "Qwen2.5-32B-Instruct-AWQ, A6000, vllm #10360", "0.6.4.post1",
         "within 3%; non-torch with the context 0.38 predicted (0.28 context + local memory; an A6000 is not "
         "in the GPU table, so the A100's 0.10) vs 0.44 logged"),
    Case("issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log",
         ("--model", "qwen2.5-32b", "--vllm-version", "0.8.5", "-pp", "2", "-q", "bitsandbytes", "--gpu",
          "rtx5090"),
         "0.8.5", "kv_pool", "QwQ-32B bnb 4-bit, PP=2, RTX 5090, vllm #14452", "0.8.5 dev",
         "Unsloth's dynamic 4-bit keeps layers in 16 bit (its config lists them; the log names no repo and "
         "no "
         "copy of that config was found): weights 9.66 vs 10.30 GiB logged; bitsandbytes' "
         "dequantize-for-GEMM "
         "temporaries are not modelled",
         fitted="non-torch: the NCCL / all-reduce part (its logged 0.33 is one of the two values behind it)",
         explain_says="bitsandbytes: the checkpoint keeps more layers in 16 bit"),
    Case("pr12569_v1_0.7_llama31-70b-w8a8.log",
         ("--model", "llama-3.1-70b", "--vllm-version", "0.7.1", "--gpu", "h100"),
         "0.7.1", "num_blocks", "Llama-3.1-70B W8A8, vllm PR #12569", "0.7.1 dev (V1)",
         "V1 0.7's non-torch holds the CUDA context: 0.43 GiB predicted for an H100 (the 3090's context + an "
         "H100's local memory), the blocks imply ~0.95; the GPU is assumed (not in the log), the pool is 9% "
         "of the budget", explain_says="V1 before 0.9.1 counts the CUDA context"),
    Case("issue21348_qwen3-235b-fp8_tp4_h100.log",
         ("--model", "qwen3-235b-a22b", "--vllm-version", "0.10.0", "--gpu", "h100"),
         "0.10.0", "kv_pool", "Qwen3-235B-A22B-FP8, TP=4 H100, vllm #21348",
         "not in the log (0.10.0 assumed)",
         "was +27.6%: 0.9.1-0.10.x take their baseline before the distributed init (v0.10.0 "
         "gpu_worker.py:163, :181), so NCCL's set-up counts, 2.04 GiB per rank on Hopper (sized on vLLM's "
         "own H200 reproduction, PR #21429, an in-sample log); left ~0.5 GiB more used than predicted, not "
         "derived: the LMCache connector (initialized inside the same window), the node's interconnect; "
         "version, GPU and utilization assumed", explain_says="a KV connector is configured"),
    Case("club3090_612_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3.5-35B-A3B.json", "--gpu", "rtx5090"),
         "0.24.0", "kv_pool", "Qwen3.6-35B-A3B NVFP4, RTX 5090, club-3090 #612", "0.24.0",
         "within 3% (was -11.3%): no gpu_memory_utilization in the args, and vLLM's default is 0.92 from "
         "0.20 (v0.20.0 config/cache.py:66), not 0.9: +0.63 GiB budget; the encoder's profile run (one dummy "
         "image of 16,384 tokens: the image's 16,384 outrank the video's 12,288, the budget is max(8,192, "
         "16,384)) is as vLLM 0.24.0 sizes it (multimodal/encoder_budget.py:44-189), max_pixels from the "
         "family's preprocessor_config"),
    Case("issue27508_v0.11.0_gpt-oss-120b_h100.log",
         ("--model", "gpt-oss-120b", "--vllm-version", "0.11.0", "--gpu", "h100",
          "--gpu-memory-utilization", "0.95", "--max-num-batched-tokens", "1024"),
         "0.11.0", "kv_pool", "gpt-oss-120b, H100, vllm #27508", "0.11.0 (by the log line's source line)",
         "a pool of 2% of the budget: 0.14 GiB off is +8%; the sampler's peak over 1,024 rows (7.34 GiB "
         "predicted) is not in the log", explain_says="2% of the budget"),
    Case("club3090_652_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3.5-35B-A3B.json", "--gpu", "rtx5090"),
         "0.24.0", "kv_pool", "the same setup, club-3090 #652", "0.24.0", "as #612"),
    Case("issue10517_v0.6.4_llama31-8b_rtx3090_mml20000.log",
         ("--model", "llama-3.1-8b", "--vllm-version", "0.6.4", "--gpu", "rtx3090"), "0.6.4", "kv_pool",
         "Llama-3.1-8B-Instruct, RTX 3090, vllm #10517, max_model_len 20,000", "0.6.4 (by its wording)",
         "weights 14.9888 GiB = logged; activation 2.07 = logged; non-torch 0.35 = logged (the context part "
         "was fitted here)",
         fitted="non-torch: the CUDA context (0.35 GiB logged here, less the 3090's local memory)"),
    Case("issue10517_v0.6.4_llama31-8b_rtx3090_mml29000.log",
         ("--model", "llama-3.1-8b", "--vllm-version", "0.6.4", "--gpu", "rtx3090"), "0.6.4", "kv_pool",
         "the same at 29,000",
         "0.6.4", "activation 3.00 predicted vs 2.99 logged; the same non-torch",
         fitted="non-torch: the CUDA context (0.35 GiB logged here, less the 3090's local memory)"),
    # helper 9f's held-out logs (the rule in SOURCES.md): dennislee22/vLLM-benchmarking, vLLM 0.10.1.1 on
    # A100s; Qwen2-7B-Instruct has the catalog qwen2.5-7b's shape fields (SOURCES.md)
    Case(DL + "qwen2-7b_a100-80gb_gmu0.25.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         "Qwen2-7B-Instruct, A100 80GB, dennislee22, gpu_memory_utilization 0.25", "0.10.1.1",
         "within 3%: the log says FlashInfer samples (0.52 GiB activation, not the sort path's 1.39); "
         "non-torch 0.12 (an A100's local memory)"),
    Case(DL + "qwen2-7b_a100-80gb_gmu0.5.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         "the same at 0.5", "0.10.1.1", "as above"),
    Case(DL + "qwen2-7b_a100-80gb_tp2_gmu0.25.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         "the same, TP=2 in one node, 0.25", "0.10.1.1",
         "within 3%; non-torch 0.28 per rank (local memory + NCCL / all-reduce) against ~0.13 left by the "
         "log"),
    Case(DL + "qwen2-7b_a100-80gb_tp2_gmu0.5.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         "the same, TP=2 in one node, 0.5", "0.10.1.1", "as above"),
    Case(DL + "qwen2-7b_a100-40gb_tp2_ray.log", ("--model", "qwen2.5-7b", "--gpu", "a100-40gb"), "0.10.1.1",
         "kv_pool", "the same, TP=2 over Ray on two A100 40GB nodes, 0.5", "0.10.1.1",
         "within 3%: this log says FlashInfer is not available, so the sort path (1.39 GiB)"),
    Case(DL + "gpt-oss-120b_a100-80gb_tp4_ray.log", ("--model", "gpt-oss-120b", *A100), "0.10.1.1", "kv_pool",
         "gpt-oss-120b, TP=4 over Ray, A100 80GB, dennislee22", "0.10.1.1",
         "within 3%; weights -0.3% (Marlin MXFP4 padding); the workers log FlashInfer's sampler"),
    Case("colab_v0.11.0_llama31-8b_l4.log", ("--model", "llama-3.1-8b", *L4), "0.11.0", "kv_pool",
         "Llama-3.1-8B-Instruct, L4 (Colab), max_model_len 32000", "0.11.0",
         "within 3% (was -3.4%): non-torch now by the GPU's resident threads, 0.05 GiB on an L4 (58 SMs) "
         "instead of 0.10; the L4 (22.05 GiB, not in the log) is now in the GPU table"),
    Case("autodl_v0.10.2_qwen25-3b_24gb.log", ("--model", "qwen2.5-3b"), "0.10.2", "kv_pool",
         "Qwen2.5-3B, 24 GB card (AutoDL), max_num_seqs 1", "0.10.2",
         "within 3%; total from the log, GPU not named (non-torch 0.10 predicted vs 0.02 logged)"),
    Case("autoscientists_v0.26.1dev_qwen3-coder-30b-a3b_a100.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3-Coder-30B-A3B-Instruct.json", "--gpu", "a100-80gb"),
         "0.26.1rc1.dev156+g0eec856cc.d20260731", "kv_pool", "Qwen3-Coder-30B-A3B-Instruct, A100 80GB",
         "0.26.1 dev",
         "within 3%; the graph estimate from the log's counts (7 PIECEWISE + 5 FULL): 0.09 GiB predicted vs "
         "0.15 logged; activation 0.12 predicted vs 0.23 logged"),
    Case("vediosifter_v0.12.0_qwen3-30b-a3b_rtxpro6000.log",
         ("--model", "qwen3-30b-a3b", "--total-gib", "94.97"), "0.12.0", "kv_pool",
         "Qwen3-30B-A3B-Instruct-2507, RTX PRO 6000 Blackwell, eager", "0.12.0",
         "within 3%; total 94.97 GiB from the same repository's other log"),
    Case("memsuit_v0.17.1_llama31-8b_a100.log", ("--model", "llama-3.1-8b", *A100), "0.17.1", "kv_pool",
         "Llama-3.1-8B-Instruct, A100 80GB, max_model_len 32768", "0.17.1",
         "within 3% (80 GB part and the table's total assumed)"),
    Case("memsuit_v0.17.1_qwen25-3b-distill_a100.log", ("--model", "qwen2.5-3b", *A100), "0.17.1", "kv_pool",
         "LoRA-merged Qwen2.5-3B, the same A100", "0.17.1", "within 3%"),
    Case("mlops_v0.10.2_qwen3-30b-a3b_h100.log", ("--model", "qwen3-30b-a3b", *H100), "0.10.2", "kv_pool",
         "Qwen3-30B-A3B-Instruct-2507, H100 80GB", "0.10.2",
         "within 3%; activation 5.58 predicted = 5.58 logged; non-torch 0.14 vs 0.07 logged"),
    Case("mlops_v0.22.1_qwen3-30b-a3b-fp8_h100.log", ("--model", "qwen3-30b-a3b", *H100), "0.22.1", "kv_pool",
         "the same with online fp8, max_num_seqs 64", "0.22.1",
         "within 3% (was -3.0%): the log's own line says gpu_memory_utilization 0.92 (vLLM's default from "
         "0.20, not 0.9); the graph estimate from the log's counts (19 PIECEWISE + 11 FULL x 7.9 MiB): 0.23 "
         "GiB predicted vs 0.14 logged for this fp8 MoE model"),
    Case("vllmrouter_ngc26.01_v0.13.0_gpt-oss-20b_gb10.log", ("--model", "gpt-oss-20b", "--gpu", "gb10"),
         "0.13.0+faa43dbf.nv26.01", "kv_pool", "gpt-oss-20b (abliterated), DGX Spark GB10, NGC 26.01",
         "0.13.0 (NGC)",
         "was -32.4%: NVML has no memory total on GB10, so vLLM takes the small scheduler defaults (256 "
         "sequences, now derived); left: ~1.4 GiB more used than predicted, not derived: on GB10 vLLM reads "
         "free memory as the host's MemAvailable (v0.13.0 utils/mem_utils.py:85-111), a machine-wide figure, "
         "so host memory taken inside the profile window (torch.compile ran 50 s there) counts as "
         "non-torch; the total is the table's, not the log's",
         explain_says="unified memory (GB10)"),
    Case("localai_v0.19.1_phi3-mini_rtx3090_wsl.log", ("--model", "phi-3-mini", "--gpu", "rtx3090"), "0.19.1",
         "kv_pool", "Phi-3-mini-4k-instruct, RTX 3090 under WSL2", "0.19.1",
         "within 3% (was -4.1%): the log says WSL2, where the total is the card's frame buffer (24.00 GiB, "
         "the "
         "rule an RTX 5090 shows) rather than the native 23.58; the graph estimate is logged, not deducted"),
    Case("videocutting_v0.12.0_qwen3-30b-a3b_h100_tp2.log", ("--model", "qwen3-30b-a3b", *H100), "0.12.0",
         "kv_pool", "Qwen3-30B-A3B, TP=2 H100 80GB, max_num_seqs 64", "0.12.0",
         "within 3%; non-torch 0.14 per rank, an H100's local memory (NCCL and the custom all-reduce are set "
         "up before 0.11+'s baseline: v0.11.0 gpu_worker.py:169, :182)"),
    Case("graphrag_v0.10.2_qwen3-4b_80gb.log", ("--model", "qwen3-4b"), "0.10.2", "kv_pool",
         "Qwen3-4B, vLLM defaults, unnamed 80 GB card", "0.10.2",
         "within 3%; activation 5.56 predicted vs 5.59 logged"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4.log",
         (*AKAMAS, "--max-num-seqs", "256", "--max-num-batched-tokens", "4096"), "0.29.0", "kv_tokens",
         "gpt-oss-20b, L4, max_num_seqs 256 (akamas study)", "0.29.0",
         "the token figure is right and the pool is not: 0.29 logs int(blocks / blocks per request x "
         "max_model_len), 2,048 full + 521 sliding-window blocks per request (kv_cache_utils.py:1047-1079, "
         "2011-2033), as predicted, so the logged tokens imply 6,493 blocks, a 2.38 GiB pool against 3.81 "
         "predicted. Derived from 0.29.0's source: model runner V2's buffers 0.21 GiB, the kept Marlin MoE "
         "workspace 0.27, its greedy dummy sampler (activation 0.16). Left, ~1.4 GiB deducted beyond the "
         "predicted terms, not identified: vLLM measures its CUDA-graph estimate on the device (every "
         "PIECEWISE capture; the FULL graphs as first + (n - 1) x the second-largest's cost, v1/worker/gpu/"
         "cudagraph_utils.py:712-831), where 0.54 GiB is predicted (70 graphs x 7.9 MiB, H100 logs of the V1 "
         "runner); the gap would need ~29 MiB a graph here, ~15 in the two fp8-KV runs below. The study's "
         "DCGM view of this run (same results file) shows 18,604 MiB in use after start-up, 0.57 GiB under "
         "the 18.74 GiB budget: vLLM did not keep all it deducted",
         explain_says="extrapolated from the two largest"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4_kvfp8.log",
         (*AKAMAS, "--max-num-seqs", "512", "--max-num-batched-tokens", "8192", "--block-size", "64"),
         "0.29.0", "kv_tokens", "the same L4 study, fp8 KV, max_num_seqs 512", "0.29.0",
         "as above at 512 sequences and 8,192 tokens (V2 buffers 0.42, workspace 0.55 GiB): the tokens imply "
         "3,082 blocks, a 2.26 GiB pool against 2.93 predicted; ~0.67 GiB deducted beyond 102 graphs "
         "predicted at 0.79 GiB, not identified (its DCGM view: 20,056 MiB in use after start-up, above the "
         "budget)",
         explain_says="extrapolated from the two largest"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4_block96.log",
         (*AKAMAS, "--max-num-seqs", "256", "--max-num-batched-tokens", "4096", "--block-size", "96"),
         "0.29.0", "kv_tokens", "the same L4 study, block size 96", "0.29.0",
         "as the first configuration: its 82,453 tokens imply 1,082 blocks of 96 tokens, the same 2.38 GiB "
         "pool (the block size moves only the rounding, as predicted)",
         explain_says="extrapolated from the two largest"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4_tp2_ep.log",
         (*AKAMAS, "--max-num-seqs", "512", "--max-num-batched-tokens", "8192", "--block-size", "32",
          "--enable-expert-parallel"), "0.29.0", "kv_tokens",
         "the same L4 study, TP=2 with expert parallelism, fp8 KV", "0.29.0",
         "within 3% (was -3.8%): NCCL and the custom all-reduce no longer added, as vLLM 0.11+ sets them "
         "up before its baseline (v0.29.0 gpu_worker.py:416-439); 16 whole experts per rank (expert "
         "parallelism, from vLLM's FusedMoEParallelConfig); V2 buffers 0.42 and the workspace of whole "
         "experts 0.55 GiB per rank derived; the tokens imply a 9.69 GiB pool against 9.48: 70 graphs at the "
         "TP size (16.7 MiB, H100 TP=2 logs whose custom all-reduce registers the graphs' buffers) are 1.14 "
         "GiB"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4_dp4_eager.log",
         (*AKAMAS, "--max-num-seqs", "256", "--max-num-batched-tokens", "4096", "--no-async-scheduling"),
         "0.29.0", "kv_tokens", "the same L4 study, DP=4 eager", "0.29.0",
         "within 3% (was +5.1%): the experts' width split over the 4 DP ranks (vLLM flattens TP across DP "
         "for MoE); model runner V2's buffers 0.21 GiB and the Marlin workspace for the 16,384 tokens the "
         "naive DP dispatch all-gathers, 0.75 GiB, derived; eager, no graphs"),
    # llm-d-planner's measured sweep: full vLLM 0.19.0 logs on one H100 80GB (79.19 GiB) at DEBUG, so the
    # profile's own breakdown is logged; the checkpoints' shapes are the catalog's (Instruct = base shapes)
    Case(V19 + "llama31-8b_tp1.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_pool",
         "Llama-3.1-8B-Instruct, H100, llm-d-planner sweep", "0.19.0",
         "activation 1.885 predicted vs 1.89 logged, weights -0.2%, graph estimate rightly not deducted; "
         "non-torch 0.25 fitted on these logs", fitted=V19_FIT),
    Case(V19 + "llama31-8b_tp2.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_pool",
         "the same, TP=2", "0.19.0",
         "activation right on both ranks; non-torch 2.07 logged per rank, 2.1 fitted", fitted=V19_FIT),
    Case(V19 + "llama31-8b_pp2.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_tokens",
         "the same, PP=2",
         "0.19.0", "compared on tokens (only stage 0 logs its pool); non-torch 0.07 fitted", fitted=V19_FIT),
    Case(V19 + "qwen25-7b_tp1.log", ("--model", "qwen2.5-7b", *H100), "0.19.0", "kv_pool",
         "Qwen2.5-7B-Instruct, H100, llm-d-planner", "0.19.0", "activation 2.205 predicted vs 2.21 logged",
         fitted=V19_FIT),
    Case(V19 + "qwen3-8b_tp1.log", ("--model", "qwen3-8b", *H100), "0.19.0", "kv_pool",
         "Qwen3-8B, H100, llm-d-planner", "0.19.0", "activation 2.213 predicted vs 2.21 logged",
         fitted=V19_FIT),
    Case(V19 + "gemma2-9b_tp1.log", ("--model", "gemma-2-9b", *H100), "0.19.0", "kv_pool",
         "gemma-2-9b-it, H100, llm-d-planner", "0.19.0",
         "activation 3.643 predicted vs 3.65; the sliding-window/global pages match", fitted=V19_FIT),
    Case(V19 + "phi4_tp1.log", ("--model", "phi-4", *H100), "0.19.0", "kv_pool", "phi-4, H100, llm-d-planner",
         "0.19.0", "activation 1.518 predicted vs 1.52 logged", fitted=V19_FIT),
    Case(V19 + "qwen25-72b_tp2.log", ("--model", "qwen2.5-72b", *H100), "0.19.0", "kv_pool",
         "Qwen2.5-72B-Instruct, TP=2 H100, llm-d-planner", "0.19.0",
         "activation 2.292 vs 2.29 logged; a pool of 4% of the budget; non-torch 2.1 fitted", fitted=V19_FIT),
)  # fmt: skip


# The accuracy the README states for the table below, asserted against the measured run: a regression below a
# target fails, an improvement needs no change here (the README's block is regenerated from the same run).
TARGETS = {"held_out_median": 0.0096, "held_out_within": 23, "all_median": 0.0067, "all_within": 33}
README = REPO_ROOT / "README.md"
TABLE_BEGIN = "<!-- explain-table: generated by tests/tui/test_explain.py, do not edit by hand -->"
TABLE_END = "<!-- explain-table end -->"


@functools.cache
def _explained(log: str, args: tuple[str, ...]) -> dict:
    """`memsight explain LOG ARGS --json` in this process (the CLI's own main; the subprocess tests below
    check the same command end to end)."""
    parser = argparse.ArgumentParser()
    cmd_explain.add_arguments(parser, "explain")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cmd_explain.main(parser.parse_args([str(LOGS / log), *args, "--json"]), "explain") == 0
    return json.loads(out.getvalue())


def result(case: Case) -> dict:
    return _explained(case.log, case.args)


def error(case: Case) -> float:
    row = result(case)["rows"][case.row]
    return row["predicted"] / row["logged"] - 1


def summary(cases) -> tuple[float, float, int, int]:
    """(median |error|, worst |error|, logs within 3%, logs)."""
    errors = [abs(error(c)) for c in cases]
    return statistics.median(errors), max(errors), sum(e <= 0.03 for e in errors), len(errors)


HELD_OUT = tuple(c for c in CASES if not c.fitted)


@pytest.mark.parametrize("case", CASES, ids=[c.log for c in CASES])
def test_each_log_is_predicted_from_the_config_alone(case):
    out = result(case)
    assert out["vllm_version"] == case.version
    row = out["rows"][case.row]
    assert row["logged"] is not None and row["predicted"] is not None
    # nothing the log measured went into the prediction: every term is PREDICTED or a stated input
    hows = {t["name"]: t["how"] for t in out["terms"]}
    assert all(hows[n] == "PREDICTED" for n in ("weights", "activation peak", "non-torch", "CUDA graphs"))
    assert hows["device total"] in ("given", "log")
    assert case.label and case.why


def test_accuracy_meets_the_targets_the_readme_states():
    """The held-out logs (no constant of the model was fitted on them) and all logs, against TARGETS, which
    the README's generated block states."""
    median, _, within, _ = summary(HELD_OUT)
    assert median < TARGETS["held_out_median"] and within >= TARGETS["held_out_within"]
    median, _, within, _ = summary(CASES)
    assert median < TARGETS["all_median"] and within >= TARGETS["all_within"]


@pytest.mark.parametrize("case", [c for c in CASES if abs(error(c)) > 0.03], ids=lambda c: c.log)
def test_every_miss_says_its_cause_in_its_case_and_in_explains_output(case):
    out = result(case)
    said = " ".join([*out["notes"], *(r["cause"] for r in out["rows"].values())])
    assert case.explain_says and case.explain_says in said, (case.log, said)


def test_in_sample_cases_are_named_and_the_held_out_set_is_not_empty():
    """A log whose figures set an empirical constant cannot test that constant: each such Case says which,
    and the held-out logs remain to check the model on data it never saw."""
    fitted = [c for c in CASES if c.fitted]
    assert all(c.fitted.startswith("non-torch") for c in fitted)
    assert {c.log for c in fitted} >= {c.log for c in CASES if c.log.startswith(V19)}
    assert len(HELD_OUT) >= 20


def _fmt(case: Case, value: float) -> str:
    if case.row == "kv_pool":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def readme_block() -> str:
    """The README's explain table and its summary lines, from the measured run."""
    unit = {"kv_pool": "pool {} GiB", "num_blocks": "{} blocks", "kv_tokens": "{} tokens"}
    lines = [
        TABLE_BEGIN,
        "<!-- asserted by: tests/tui/test_explain.py::test_accuracy_meets_the_targets_the_readme_states "
        "tests/tui/test_explain.py::test_readme_table_is_the_one_the_cases_produce -->",
        "| log | vLLM | logged | predicted | error | why it misses |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case in CASES:
        row = result(case)["rows"][case.row]
        held = "" if case.fitted else " (held out)"
        lines.append(
            f"| {case.label}{held} | {case.vllm} | {unit[case.row].format(_fmt(case, row['logged']))} | "
            f"{_fmt(case, row['predicted'])} | {error(case):+.1%} | {case.why} |"
        )
    for name, cases in (("All", CASES), ("Held out (no constant fitted on them)", HELD_OUT)):
        median, worst, within, count = summary(cases)
        lines.append("")
        lines.append(
            f"{name}: {count} logs, median |error| {median:.2%}, worst {worst:.1%}, {within} within 3%."
        )
    lines.append("")
    lines.append(
        f"Targets, asserted on every run of the suite: held-out median under "
        f"{TARGETS['held_out_median']:.2%} and at least {TARGETS['held_out_within']} within 3%; all logs "
        f"median under {TARGETS['all_median']:.2%} and at least {TARGETS['all_within']} within 3%."
    )
    lines.append(TABLE_END)
    return "\n".join(lines)


def test_readme_table_is_the_one_the_cases_produce():
    """The README's table is this test's output: regenerate it with
    `MEMSIGHT_WRITE_README=1 python -m pytest tests/tui/test_explain.py -k readme_table`."""
    text = README.read_text(encoding="utf-8")
    assert TABLE_BEGIN in text and TABLE_END in text, "the README lost its generated explain table"
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    block = readme_block()
    if os.environ.get("MEMSIGHT_WRITE_README") == "1":
        README.write_text(text[:start] + block + text[end:], encoding="utf-8")
        return
    assert text[start:end] == block, "README's explain table differs from the run: " + block


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.log.startswith(V19) and "_pp" not in c.log], ids=lambda c: c.log
)
def test_dense_profile_activation_against_the_logged_torch_peak(case):
    """The 0.19.0 DEBUG logs state the profile run's torch peak ('torch peak memory increase: 1.89GiB', two
    decimals): the prediction from vLLM's source (Triton sampler over max_num_seqs rows) is within it."""
    row = result(case)["rows"]["activation"]
    assert abs(row["predicted"] - row["logged"]) <= 0.01, (case.log, row)


@pytest.mark.parametrize(
    "log,args",
    [
        (V19 + "llama31-8b_tp1.log", ("--model", "llama-3.1-8b", *H100)),  # 14.99 logged
        (V19 + "qwen3-8b_tp1.log", ("--model", "qwen3-8b", *H100)),  # 15.27
        (V19 + "gemma2-9b_tp1.log", ("--model", "gemma-2-9b", *H100)),  # 17.22
        (
            "issue10517_v0.6.4_llama31-8b_rtx3090_mml20000.log",  # 14.9888 GB
            ("--model", "llama-3.1-8b", "--vllm-version", "0.6.4"),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_weights_against_the_logged_model_loading(log, args):
    """'Model loading took' is the torch memory allocated while the model is built and loaded: the tensors
    plus the rotary cos/sin buffer every RotaryEmbedding registers (32 MiB for Llama-3.1's 131,072
    positions x 128 x bf16), within the log's rounding. Not derived and so not here: Qwen2.5-7B (-0.06 GiB)
    and phi-4 (-0.08 GiB) hold more than their tensors and rotary cache."""
    row = _explained(log, args)["rows"]["weights"]
    assert abs(row["predicted"] - row["logged"]) <= 0.005, (log, row)


def test_vision_language_checkpoint_counts_its_tower_only_with_the_full_config():
    log = str(LOGS / "club3090_612_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log")
    config = "tests/data/vllm_logs/configs/Qwen3.5-35B-A3B.json"
    full = explain_json(log, "--model", config, "--gpu", "rtx5090")
    terms = {t["name"]: t for t in full["terms"]}
    assert "vision tower 893,142,496 B" in terms["weights"]["source"]
    assert "encoder profile: 1 dummy image(s) of 16,384 tokens" in terms["activation peak"]["source"]
    assert not any("only the text decoder" in n for n in full["notes"])
    # the catalog keeps the text decoder only: the tower is left out, and the output says so
    text_only = explain_json(log, "--model", "qwen3.5-35b-a3b", "--gpu", "rtx5090")
    assert any("the catalog keeps the text decoder only" in n for n in text_only["notes"])
    assert text_only["rows"]["kv_pool"]["predicted"] > full["rows"]["kv_pool"]["predicted"] + 2


def test_weights_format_says_whether_quantization_was_given_or_logged():
    log = str(LOGS / "issue10360_v0.6.4.post1_qwen25-32b-awq_a6000.log")
    given = explain_json(log, "--model", "qwen2.5-32b", "-q", "awq", "--vllm-version", "0.6.4")
    assert {i["name"]: i["from"] for i in given["inputs"]}["weights format"] == "quantization=awq given (-q)"


def test_text_output_starts_with_the_worksheet_and_lists_every_row():
    done = explain(str(LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log"), "--gpu", "a100-80gb")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(WORKSHEET)
    assert "logged not in the log tokens" not in lines[0]
    assert " GiB / " in lines[0] and "max concurrency predicted" in lines[0]
    for label in ("device total (GiB)", "requested budget (GiB)", "weights (GiB)", "activation peak (GiB)",
                  "non-torch (GiB)", "CUDA graphs (GiB)", "KV pool (GiB)", "KV blocks", "KV tokens",
                  "max concurrency (x)"):  # fmt: skip
        assert any(line.strip().startswith(label) for line in lines), label
    pool = next(line for line in lines if line.strip().startswith("KV pool (GiB)"))
    assert "36.56" in pool and "(line 3)" in pool
    assert "PREDICTED" in done.stdout and "from log" in done.stdout


def test_worksheet_with_logged_tokens_and_concurrency():
    out = explain_json(
        str(LOGS / "issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log"),
        "--model", "qwen2.5-32b", "--vllm-version", "0.8.5", "-pp", "2", "-q", "bitsandbytes",
    )  # fmt: skip
    assert out["worksheet"].startswith(WORKSHEET)
    # V0 logs blocks, not tokens: logged tokens = 7299 blocks x 16
    assert "logged 116,784 (7,299 blocks) tokens" in out["worksheet"]
    assert out["worksheet"].endswith("logged 2.34x")
    assert out["rows"]["num_blocks"]["logged"] == 7299 and out["rows"]["num_blocks"]["logged_line"] == 5
    assert out["rows"]["device_total"]["logged"] == 31.37
    assert {i["name"]: i["from"] for i in out["inputs"]}["weights format"].startswith("bitsandbytes")


def test_json_keys_are_stable():
    out = explain_json(str(LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log"), "--gpu", "a100-80gb")
    assert set(out) == {
        "worksheet",
        "model",
        "vllm_version",
        "engine",
        "stage",
        "inputs",
        "terms",
        "rows",
        "notes",
    }
    assert set(out["rows"]) == ROW_KEYS
    for row in out["rows"].values():
        assert set(row) == {
            "label",
            "logged",
            "logged_line",
            "predicted",
            "difference",
            "relative",
            "how",
            "cause",
        }
    assert [t["name"] for t in out["terms"]] == [
        "device total", "requested", "weights", "activation peak", "non-torch", "CUDA graphs", "KV pool",
    ]  # fmt: skip
    assert out["rows"]["kv_pool"]["logged"] == 36.56 and out["rows"]["weights"]["logged"] == 13.72


def test_stdin():
    text = (LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log").read_text(encoding="utf-8")
    done = explain("-", "--gpu", "a100-80gb", stdin=text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(WORKSHEET)


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("-",), "hello\nworld\n",
         "memsight: not a startup log memsight reads (SGLang, Ollama, llama.cpp, vLLM)"),
        ((str(LOGS / "kvcached29_v0.9.2_free_memory_error.log"),), None,
         "memsight: vLLM died at start-up, before it printed its engine configuration (line 3): "
         "ValueError: Free"),
        ((str(LOGS / "gguf101_v0.18.0_compose_cut.log"),), None,
         "memsight: the log stops after the engine configuration, before the weights finished loading"),
        ((str(LOGS / "pr10511_v0.6.5dev_llama3-8b_h100_tp2_cut.log"),), None,
         "memsight: the log stops after the memory profile, before the KV cache was sized"),
        (("/nonexistent/vllm.log",), None, "memsight: /nonexistent/vllm.log: cannot read startup log: No"),
        ((str(LOGS / "ascend1425_v0.9.1_qwen25-3b_310p3_npu.log"),), None,
         "memsight: this vLLM ran on an Ascend NPU (vllm-ascend) (line 5), not CUDA"),
        ((str(LOGS / "pr17122_v1_0.8_llama31-8b_l40s.log"),), None,
         "memsight: the log does not name the model"),
        ((str(LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log"),), None,
         "memsight: the log does not state the device's total memory"),
        ((str(LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log"), "--gpu", "tpu-v9"), None,
         "memsight: no recorded mem_get_info total for GPU 'tpu-v9'"),
        ((str(LOGS / "pr12569_v1_0.7_llama31-70b-w8a8.log"), "--model", "llama-3.1-70b", "--gpu", "h100"),
         None,
         "memsight: the log does not say which vLLM version wrote it"),
        ((str(LOGS / "myoceane_v0.19.0_gpt-oss-20b_a100.log"), "--gpu", "a100",
          "--gpu-memory-utilization", "2"),
         None, "memsight: --gpu-memory-utilization out of range: 2.0"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args, stdin, message):
    done = explain(*args, stdin=stdin)
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1


def test_a_negative_size_is_refused_at_its_line(tmp_path: pathlib.Path):
    text = (LOGS / "mlops_v0.22.1_qwen3-30b-a3b-fp8_h100.log").read_bytes()
    damaged = tmp_path / "damaged.log"
    damaged.write_bytes(text.replace(b"Model loading took 29.08 GiB", b"Model loading took -29.08 GiB"))
    done = explain(str(damaged), "--model", "qwen3-30b-a3b", "--gpu", "h100")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "memsight: line 55: -29.08 GiB is a weights figure out of range (vLLM logs sizes and counts of 0 or "
        "more, finite)\n"
    )


def test_binary_input_is_refused(tmp_path: pathlib.Path):
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    done = explain(str(blob))
    assert done.returncode == 2 and done.stderr == f"memsight: {blob}: binary data, not a text log\n"


def test_flags_for_what_an_excerpt_leaves_out():
    """--kv-cache-dtype: an fp8 cache holds twice the tokens of the same pool; --enforce-eager: no graphs, so
    the estimate a version takes from the pool is not taken (vLLM 0.22.1 takes it by default)."""
    log, args = "myoceane_v0.19.0_gpt-oss-20b_a100.log", ("--gpu", "a100-80gb")
    auto, fp8 = _explained(log, args), _explained(log, (*args, "--kv-cache-dtype", "fp8"))
    assert fp8["rows"]["kv_pool"]["predicted"] == auto["rows"]["kv_pool"]["predicted"]
    assert abs(fp8["rows"]["kv_tokens"]["predicted"] / auto["rows"]["kv_tokens"]["predicted"] - 2) < 0.001
    assert ("KV cache dtype", "fp8", "given") in {(i["name"], i["value"], i["from"]) for i in fp8["inputs"]}
    log, args = "mlops_v0.22.1_qwen3-30b-a3b-fp8_h100.log", ("--model", "qwen3-30b-a3b", *H100)
    graphs = {t["name"]: t for t in _explained(log, args)["terms"]}["CUDA graphs"]
    eager = _explained(log, (*args, "--enforce-eager"))
    assert graphs["bytes"] > 0 and "19 PIECEWISE + 11 FULL" in graphs["source"]
    assert {t["name"]: t for t in eager["terms"]}["CUDA graphs"]["bytes"] == 0
    graphed = _explained(log, args)
    pool_gain = eager["rows"]["kv_pool"]["predicted"] - graphed["rows"]["kv_pool"]["predicted"]
    # eager also leaves 0.18-0.26's graph captures out of the non-torch window (planner non_torch_era)
    non_torch_gain = graphed["rows"]["non_torch"]["predicted"] - eager["rows"]["non_torch"]["predicted"]
    assert non_torch_gain > 0 and abs(pool_gain - graphs["gib"] - non_torch_gain) < 0.01


def test_the_model_named_only_in_the_loading_line_and_a_hub_variant():
    """A log whose only mention of the model is "Starting to load model X..." (here the Colab L4 log without
    its command, non-default args and engine-config lines), X a hub id the catalog holds as its base model."""
    text = (LOGS / "colab_v0.11.0_llama31-8b_l4.log").read_text(encoding="utf-8").splitlines()
    kept = [
        line for line in text
        if not any(k in line for k in ("non-default args", "with config:", "vllm serve", "model_tag"))
    ]  # fmt: skip
    done = explain("-", "--gpu", "l4", "--json", stdin="\n".join(kept) + "\n")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["model"] == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert any("architecture from the catalog entry llama-3.1-8b" in n for n in out["notes"])
    # a hub id the catalog holds only as its base: Qwen/Qwen2.5-0.5B-Instruct -> qwen2.5-0.5b
    out = _explained("graphrag_v0.10.2_qwen3-4b_80gb.log", ("--model", "Qwen/Qwen2.5-0.5B-Instruct"))
    assert any("catalog entry qwen2.5-0.5b" in n for n in out["notes"])


def test_a_negative_pool_is_said_to_be_clamped_and_which_terms_overran():
    out = _explained(
        "issue23278_gpt-oss-120b_h100_marlin.log",
        ("--model", "gpt-oss-120b", "--vllm-version", "0.10.1", *H100),
    )
    pool = out["rows"]["kv_pool"]
    assert pool["logged"] == -2.14 and pool["predicted"] == 0
    assert pool["cause"].startswith("clamped to 0: the terms taken from the 71.30 GiB budget (weights 65.93")
    assert out["notes"][0].startswith("the predicted pool is negative (-2.10 GiB), shown clamped to 0")
    assert "no measured term differs" not in pool["cause"]


def test_what_the_log_says_about_the_platform_decides_totals_and_defaults():
    # WSL2: the total is the card's frame buffer (the log's "WSL is detected" line)
    inputs = {i["name"]: i for i in result(next(c for c in CASES if "localai" in c.log))["inputs"]}
    assert inputs["WSL2"]["value"] == "rtx3090-wsl's WSL2 total" and inputs["WSL2"]["from"] == "log line 14"
    # GB10: NVML has no memory total there, so vLLM's scheduler takes its small defaults
    spark = result(next(c for c in CASES if "gb10" in c.log))
    assert any("NVML reports no memory total on this device" in n for n in spark["notes"])
    assert any("unified memory (GB10)" in n for n in spark["notes"])


def test_the_distributed_init_is_sized_on_its_in_sample_hopper_log_only():
    """V1 0.9.1-0.10.x take their baseline before the distributed init, so NCCL's set-up is non-torch
    there. Its Hopper size is read off vLLM's own H200 reproduction of #21348 (PR #21429: in-sample, so not a
    Case); the rest of that log follows from the config. A100 runs of the same window (dennislee22) keep the
    small size."""
    fit = _explained(
        "pr21429_v0.10.0dev_qwen3-235b-fp8_tp4_h200.log",
        ("--model", "qwen3-235b-a22b", "--vllm-version", "0.10.0", "--gpu", "h200"),
    )
    rows = fit["rows"]
    assert rows["requested"]["predicted"] == 69.86 and rows["non_torch"]["logged"] == 2.04
    assert abs(rows["non_torch"]["predicted"] - 2.04) <= 0.005
    assert abs(rows["kv_pool"]["predicted"] / rows["kv_pool"]["logged"] - 1) < 0.02
    a100 = result(next(c for c in CASES if c.log == DL + "qwen2-7b_a100-80gb_tp2_gmu0.5.log"))
    assert a100["rows"]["non_torch"]["predicted"] < 0.5


def test_a_token_count_alone_is_turned_into_the_pool_it_implies():
    """vLLM 0.29 logs tokens = int(blocks / blocks per request x max_model_len), the blocks per request summed
    over the KV-cache groups (v0.29.0:vllm/v1/core/kv_cache_utils.py:1047-1079, 2011-2021): for gpt-oss-20b
    at max_model_len 32,768, block 16 and 2 x 4,096 tokens in flight, 2,048 (full) + cdiv(127 + 8,192, 16)
    + 1 = 521 (sliding) = 2,569, so the akamas study's 82,819 tokens are 6,493 blocks (int(6,493 / 2,569 x
    32,768) = 82,819; 6,492 gives 82,806) of 12 layers x 32,768 B, a 2.38 GiB pool."""
    case = next(c for c in CASES if c.log == "akamas_v0.29.0_gpt-oss-20b_l4.log")
    note = next(n for n in result(case)["notes"] if "tokens imply" in n)
    assert note.startswith("the logged 82,819 tokens imply 6,493 KV blocks x 393,216 B = a pool of 2.38 GiB")
    assert "2,569 blocks per request of 32,768 tokens" in note and "less than predicted" in note
    # a log that states its pool or block count gets no such note
    v19 = next(c for c in CASES if c.log == V19 + "llama31-8b_tp1.log")
    assert not any("tokens imply" in n for n in result(v19)["notes"])


def test_the_default_utilization_is_the_versions_and_the_logs_own_line_wins():
    """vLLM's gpu_memory_utilization default is 0.9 up to 0.19 and 0.92 from 0.20 (v0.20.0
    config/cache.py:66); 0.20+ logs say the one in force after the pool ("The current
    --gpu-memory-utilization=0.9200 is equivalent to ...")."""

    def utilization(part: str) -> dict:
        inputs = result(next(c for c in CASES if part in c.log))["inputs"]
        return next(i for i in inputs if i["name"] == "gpu_memory_utilization")

    assert utilization("club3090_612")["value"] == "0.92" and "default" in utilization("club3090_612")["from"]
    assert utilization("issue21348")["value"] == "0.9" and "default" in utilization("issue21348")["from"]
    assert utilization("mlops_v0.22.1") == {"name": "gpu_memory_utilization", "value": "0.92", "from": "log"}
