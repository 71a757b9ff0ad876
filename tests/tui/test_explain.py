"""`memsight explain LOG|-` end to end (real `python -m tui.cli explain` processes) on real vLLM startup logs
(tests/data/vllm_logs, sources in its SOURCES.md).

The prediction uses none of the figures the log measured (weights, activation, non-torch, graphs, pool): only
the model, the GPU (its recorded mem_get_info total) and the engine settings. CASES records, per log, the
relative error of the predicted pool (or block count, where the log gives no pool) against the logged one;
the test asserts each error to +-0.5 percentage points of the recorded figure, so a change in the model shows
up, and test_print_config_alone_table prints the table (median and worst) that README quotes.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.conftest import REPO_ROOT

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
    row: str  # "kv_pool" or "num_blocks" (when the log has no pool figure)
    error: float  # relative error of the prediction reached (fraction)
    why: str  # the cause of the difference, in words
    # the empirical constant of the prediction that was fitted on this very log ("" = held out: nothing the
    # prediction uses came from this log), so the table can say how well it does on logs it never saw
    fitted: str = ""


CASES = (
    Case("myoceane_v0.19.0_gpt-oss-20b_a100.log", ("--gpu", "a100-80gb"), "0.19.0", "kv_pool", 0.0051,
         "within 3%; the weights match to -0.4% (MXFP4 experts padded for the A100's Marlin kernel: "
         "hidden 2880 -> 3072, width 2880 -> 2944, +0.85 GiB); the profile run's sampler is 0.17+'s Triton "
         "top-k/top-p (0.77 GiB PREDICTED for 256 rows of a 201,088 vocabulary, was 1.84 with the sort "
         "path); activation and non-torch (0.25 GiB: the 0.18-0.26 one-GPU constant, from H100 logs) are not "
         "in this log"),
    Case("pr10511_v0.6.5dev_llama3-8b_h100_tp1.log",
         ("--model", "tests/data/vllm_logs/configs/Meta-Llama-3-8B.json", "--vllm-version", "0.6.5"),
         "0.6.5", "kv_pool", 0.0323,
         "non-torch: this PR #10511 build logged 1.79 GiB (and exactly twice that at TP=2); the commit that "
         "printed this table is not readable here, only the PR as merged = released 0.6.5, which counts "
         "the growth after its baseline plus allocator fragmentation (v0.6.5:vllm/utils.py:1736); the "
         "empirical growth constant 0.10 GiB is used (released 0.6.6 logged 0.10 in vllm #12330)"),
    Case("issue10360_v0.6.4.post1_qwen25-32b-awq_a6000.log",
         ("--model", "qwen2.5-32b", "-q", "awq", "--vllm-version", "0.6.4", "--max-model-len", "4096"),
         "0.6.4", "kv_pool", 0.0118,
         "meets the 3% target; weights + activation predicted 19.43 GiB against the logged absolute "
         "torch peak 19.60 (0.6.4 logs it with the weights inside), non-torch 0.35 (the RTX 3090 "
         "context figure) against 0.44 logged on this A6000"),
    Case("issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log",
         ("--model", "qwen2.5-32b", "--vllm-version", "0.8.5", "-pp", "2", "-q", "bitsandbytes"),
         "0.8.5", "kv_pool", 0.0761,
         "Unsloth's dynamic 4-bit keeps layers in 16 bit that its config lists (the log does not name "
         "the repo and no copy of its config.json was found): weights 10.80/10.30 GiB logged vs 9.63 "
         "predicted; the last stage's activation 1.77 logged vs 1.44 (bitsandbytes dequantizes each "
         "weight to 16 bit for the GEMM: not modelled; 64 layers split 32/32 as get_pp_indices does)",
         fitted="non-torch 0.25 GiB under TP/PP (its logged 0.33 is one of the values behind it)"),
    Case("pr12569_v1_0.7_llama31-70b-w8a8.log",
         ("--model", "llama-3.1-70b", "--vllm-version", "0.7.1", "--gpu", "h100"),
         "0.7.1", "num_blocks", 0.0876,
         "V1 0.7.1's profile run is derived (logits of all 8192 dummy tokens, no sampler, the runner's input "
         "buffers in the absolute peak; 8192 tokens / 1024 sequences on an H100) and the weights match to "
         "0.02% (67.710 vs 67.723 GiB, with the 32 MiB rotary cos/sin cache: was +9.3%); what is left is "
         "non-torch, which V1 < 0.9.1 counts with the CUDA context inside: the only "
         "context figure held is 0.35 GiB from an RTX 3090, the blocks imply about 0.97 GiB on this GPU "
         "(assumed an H100: the log does not name it)"),
    Case("issue21348_qwen3-235b-fp8_tp4_h100.log",
         ("--model", "qwen3-235b-a22b", "--vllm-version", "0.10.0", "--gpu", "h100"),
         "0.10.0", "kv_pool", 0.2831,
         "not derived: 2.3 GiB more than predicted is used. Tested and refuted here: that the TP=4 ranks "
         "count the NCCL communicator the logits gather creates inside the window (v0.10.0 "
         "logits_processor.py:89-101, base_device_communicator.py:129, parallel_state.py:224) at the 0.19 "
         "H100 sweep's 1.85 GiB TP-minus-one-GPU size (+7.4% with it): a 0.12.0 H100 TP=2 log "
         "(videocutting) leaves at most 0.64 GiB per rank for non-torch, so that size is 0.18+'s graph "
         "captures, not the communicator. What 0.10.0 does count that later versions do not: the baseline is "
         "taken before init_worker_distributed_environment (v0.10.0 gpu_worker.py:163,181), so PyNccl's "
         "communicator and the custom all-reduce buffers (and NVLS at TP=4 on H100s) are inside the window; "
         "their size is not held. The fused-MoE "
         "buffers are now derived "
         "(v0.10.0 fused_experts: cache13/cache2 and the fp8 inputs, 0.79 GiB at 8,192 tokens x "
         "top-8) but stay below the sampler's peak (1,024 rows), so the activation is unchanged; the "
         "LMCache connector's GPU buffer (need_gpu_interm_buffer: on when not PD, in LMCache's current "
         "source; its July 2025 source was not found) would be torch memory allocated before the "
         "profile, which vLLM 0.10's memory_profiling does not count; the post (2025-07-22) states neither "
         "the version (0.10.0 assumed; 0.9.2 gives the same prediction), the GPU (H100 80GB assumed) nor "
         "gpu_memory_utilization (0.9 assumed)"),
    Case("club3090_612_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3.5-35B-A3B.json", "--gpu", "rtx5090"),
         "0.24.0", "kv_pool", -0.1170,
         "was +36.6% with the text decoder only: the vision tower (0.83 GiB bf16, from vision_config) "
         "and the encoder's profile run (one dummy image of 16,384 tokens: 2.12 GiB, above the "
         "decoder's 0.37) now count; the rest depends on the NVFP4 checkpoint's own recipe (which "
         "layers it keeps in bf16/fp8 is not in the log) and on its preprocessor's max_pixels "
         "(Qwen3-VL's 16,777,216 assumed); non-torch is now 0.18-0.26's 0.25 GiB (EMPIRICAL, from H100 "
         "0.19.0 logs; this RTX 5090 log does not state it), which moved this case from -5.9%; the mrope "
         "cos/sin cache (4 x 262,144 positions x 64 x bf16 = 128 MiB, v0.24.0 rotary_embedding/mrope.py:"
         "236-238) moved it from -8.4% to -10.5%, and the encoder block's attention step (10h per patch: "
         "residual, norm, qkv, q/k copy, rotated q/k, output; qwen2_5_vl.py:410-443) above its MLP step "
         "(2h + 2I) to -11.7%: real terms that widen the gap, so ~0.7 GiB of what the "
         "prediction holds is not used on this GPU and cannot be placed from this log (it logs only the "
         "pool)"),
    Case("issue27508_v0.11.0_gpt-oss-120b_h100.log",
         ("--model", "gpt-oss-120b", "--vllm-version", "0.11.0", "--gpu", "h100",
          "--gpu-memory-utilization", "0.95", "--max-num-batched-tokens", "1024"),
         "0.11.0", "kv_pool", 0.1085,
         "a small pool: 0.19 GiB off is +10.8% (+12.7% before the rotary cache: gpt_oss.py builds it in "
         "fp32, 131,072 x 64 x 4 B = 32 MiB). The version is the one whose gpu_worker.py logs this line "
         "at :298 (0.11.0); the command is in the post's text. Weights as Marlin holds them on an H100 "
         "without triton_kernels (65.93 GiB; #23278 logs 65.97 for that layout on 0.10.1); the activation "
         "is the "
         "sampler's peak over 1,024 rows of a 201,088 vocabulary (7.34 GiB), not in the log"),
    Case("club3090_652_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3.5-35B-A3B.json", "--gpu", "rtx5090"),
         "0.24.0", "kv_pool", -0.1214,
         "a second run of the club-3090 #612 setup (same prediction, 6.01 GiB logged): the same causes"),
    Case("issue10517_v0.6.4_llama31-8b_rtx3090_mml20000.log",
         ("--model", "llama-3.1-8b", "--vllm-version", "0.6.4"), "0.6.4", "kv_pool", 0.0013,
         "meets the 3% target, but not independently for non-torch: the 0.35 GiB context constant was taken "
         "from this very comment. Weights and activation are independent: weights 14.9888 GiB PREDICTED "
         "= the logged 14.9888 GB loaded (with the 32 MiB rotary cos/sin cache: was +1.0%); 0.6.4 logs the "
         "torch peak with the "
         "weights inside (17.06 GiB), i.e. 2.07 GiB of activation for 20,000 dummy tokens, and 2.07 is "
         "PREDICTED; the version is assumed from the wording (only 0.6.4 printed this one-line form), the "
         "GPU (RTX 3090) and the model are in the comment's text, not in the log",
         fitted="non-torch 0.35 GiB with the CUDA context (taken from this comment)"),
    Case("issue10517_v0.6.4_llama31-8b_rtx3090_mml29000.log",
         ("--model", "llama-3.1-8b", "--vllm-version", "0.6.4"), "0.6.4", "kv_pool", -0.0008,
         "the same setup at 29,000 tokens: activation 17.98 - 14.99 = 2.99 GiB logged, 3.00 PREDICTED; the "
         "same caveat on non-torch",
         fitted="non-torch 0.35 GiB with the CUDA context (taken from this comment)"),
    # helper 9f's held-out logs (the rule in SOURCES.md): dennislee22/vLLM-benchmarking, vLLM 0.10.1.1 on
    # A100s; Qwen2-7B-Instruct has the catalog qwen2.5-7b's shape fields (SOURCES.md)
    Case(DL + "qwen2-7b_a100-80gb_gmu0.25.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         -0.0065,
         "within 3% (was -17.9%): the log says 'Using FlashInfer for top-p & top-k sampling' (line 26; the "
         "README installs flashinfer-python, which 0.10's pip wheel does not require), so the dummy sampler "
         "run is FlashInfer's (fp32 copy + masked logits + probs over 256 rows x 152,064: 0.52 GiB "
         "PREDICTED), not the PyTorch sort (1.39); the logged budget 19.79 - 14.25 weights - 5.01 pool "
         "leaves 0.53 GiB for activation + non-torch, 0.62 predicted"),
    Case(DL + "qwen2-7b_a100-80gb_gmu0.5.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         -0.0026,
         "the same setup at gpu_memory_utilization 0.5 (was -3.7% with the sort path)"),
    Case(DL + "qwen2-7b_a100-80gb_tp2_gmu0.25.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         -0.0083,
         "TP=2 in one node: FlashInfer's sampler as above on both V1 ranks, non-torch 0.25 GiB (the TP "
         "constant of this era); the logged budget "
         "19.79 - 7.12 - 12.02 leaves 0.65 GiB per rank for activation + non-torch against 0.77 predicted "
         "(these A100s run without P2P: 'Custom allreduce is disabled')"),
    Case(DL + "qwen2-7b_a100-80gb_tp2_gmu0.5.log", ("--model", "qwen2.5-7b", *A100), "0.10.1.1", "kv_pool",
         -0.0039,
         "the same TP=2 setup at 0.5 (was -3.1% with the sort path)"),
    Case(DL + "qwen2-7b_a100-40gb_tp2_ray.log", ("--model", "qwen2.5-7b", "--gpu", "a100-40gb"), "0.10.1.1",
         "kv_pool", -0.0016,
         "within 3%: this log says 'FlashInfer is not available. Falling back to the PyTorch-native "
         "implementation', so the sort path is right here (1.39 GiB PREDICTED); with non-torch 0.25 that "
         "is 1.64 GiB per rank against the 1.60 the logged budget 19.75 - 7.12 - 11.03 leaves (two ranks "
         "on two nodes over Ray)"),
    Case(DL + "gpt-oss-120b_a100-80gb_tp4_ray.log", ("--model", "gpt-oss-120b", *A100), "0.10.1.1", "kv_pool",
         -0.0028,
         "within 3% (was -2.7%): weights -0.3% (MXFP4 experts padded for Marlin on sm 8.0); the workers log "
         "FlashInfer's sampler, so the activation is 0.68 GiB PREDICTED (1.83 with the sort path); "
         "non-torch the 0.25 GiB TP constant, over Ray across nodes"),
    Case("colab_v0.11.0_llama31-8b_l4.log", ("--model", "llama-3.1-8b", "--total-gib", "22.05"), "0.11.0",
         "kv_pool", -0.0335,
         "weights exact (the rotary cache counted); the log's sampler is PyTorch's sort ('FlashInfer is not "
         "available'), as predicted for 128 rows x 2,048 tokens (0.61 GiB activation); the logged budget "
         "20.29 - 14.99 - 4.75 leaves 0.55 GiB for activation + non-torch against 0.71 predicted (-0.16 "
         "GiB: -3.4% of a 4.75 GiB pool). "
         "The L4's mem_get_info total (22.05 GiB) is not in this log: it is the one vLLM's CI L4s report "
         "(SOURCES.md)"),
    Case("autodl_v0.10.2_qwen25-3b_24gb.log", ("--model", "qwen2.5-3b"), "0.10.2", "kv_pool", -0.0030,
         "within 3%: the device total (23.65 GiB) is the log's own; weights -0.8%, activation 0.17 PREDICTED "
         "(one sequence: max_num_seqs 1) vs 0.17 logged; non-torch 0.10 GiB (the 0.9.1-0.17 EMPIRICAL growth "
         "constant) vs 0.02 logged: -0.08 GiB of pool. The GPU is not named (a 24 GB card on AutoDL)"),
    Case("autoscientists_v0.26.1dev_qwen3-coder-30b-a3b_a100.log",
         ("--model", "tests/data/vllm_logs/configs/Qwen3-Coder-30B-A3B-Instruct.json", "--gpu", "a100-80gb"),
         "0.26.1rc1.dev156+g0eec856cc.d20260731", "kv_pool", 0.0014,
         "within 3%: the device total (79.25 GiB) is the log's own; weights exact, the graph estimate 0.16 "
         "PREDICTED (7 capture sizes for max_num_seqs 16) vs 0.15 logged; the activation 0.12 PREDICTED "
         "(FlashInfer's sampler, the 0.26 default, over 16 rows) vs 0.23 logged (-0.11 GiB, not derived "
         "here: 9g's area); non-torch 0.25 vs 0.33 logged (57.26 consumed "
         "- 56.93 weights). The GPU is the A100-SXM4-80GB the MoE config path names (SOURCES.md)"),
    Case("vediosifter_v0.12.0_qwen3-30b-a3b_rtxpro6000.log",
         ("--model", "qwen3-30b-a3b", "--total-gib", "94.97"), "0.12.0", "kv_pool", 0.0023,
         "within 3%: weights -0.1% (Qwen3-30B-A3B-Instruct-2507 has the catalog qwen3-30b-a3b's shapes), "
         "enforce_eager (no graphs), the sort-path sampler's 1,024 rows x 151,936 vocabulary (5.55 GiB "
         "PREDICTED, not in the log). The GPU is the RTX PRO 6000 Blackwell Server Edition the log's "
         "fused-MoE config path names; its 94.97 GiB total is the one vLLM logs on the same machine "
         "in the same repository's training log (SOURCES.md)"),
    Case("memsuit_v0.17.1_llama31-8b_a100.log", ("--model", "llama-3.1-8b", *A100), "0.17.1", "kv_pool",
         -0.0027,
         "within 3%: weights -0.2%; activation (Triton top-k/top-p over 256 rows, 108 SMs) and non-torch "
         "(0.10 GiB) are not in this log. GPU from the repository ('single A100', run_all.sh), the 80 GB "
         "part assumed (a 55.79 GiB pool does not fit the 40 GB one) with the table's 79.15 GiB total"),
    Case("memsuit_v0.17.1_qwen25-3b-distill_a100.log", ("--model", "qwen2.5-3b", *A100), "0.17.1", "kv_pool",
         -0.0016,
         "within 3%: a LoRA-merged Qwen2.5-3B (run_all.sh: 'LoRA SFT on Qwen2.5-3B'; the catalog's shapes), "
         "weights -0.7%; the same machine and assumptions as the Llama-3.1-8B log of this repository"),
    Case("mlops_v0.10.2_qwen3-30b-a3b_h100.log", ("--model", "qwen3-30b-a3b", *H100), "0.10.2", "kv_pool",
         0.0029,
         "within 3%: the total (79.18 GiB) and the breakdown are logged: weights -0.1%, activation 5.58 "
         "PREDICTED vs 5.58 logged (the sort-path sampler, 'FlashInfer is not available'), non-torch 0.10 vs "
         "0.07 logged"),
    Case("mlops_v0.22.1_qwen3-30b-a3b-fp8_h100.log", ("--model", "qwen3-30b-a3b", *H100), "0.22.1", "kv_pool",
         -0.0355,
         "the CUDA-graph estimate: 0.45 GiB PREDICTED (24 MiB per capture size, 19 sizes for "
         "max_num_seqs 64) against 0.14 logged for this fp8 MoE model (-0.31 GiB of pool); weights -0.2% "
         "(online fp8 of "
         "Qwen3-30B-A3B-Instruct-2507, the catalog's shapes); activation and non-torch are not in this log. "
         "The GPU is the H100 80GB HBM3 the fused-MoE config path names; its total is the table's 79.22"),
    Case("vllmrouter_ngc26.01_v0.13.0_gpt-oss-20b_gb10.log", ("--model", "gpt-oss-20b", "--gpu", "gb10"),
         "0.13.0+faa43dbf.nv26.01", "kv_pool", -0.3239,
         "the scheduler tier: on this DGX Spark vLLM chose the < 70 GiB defaults (the log says "
         "max_num_batched_tokens=2048; NVML reports no memory total on GB10, the log's nvidia-smi "
         "check prints 'Total GPU Memory: 0 MB'), so max_num_seqs was 256 by the same rule, while explain "
         "keys the tier on the 119.7 GiB total and predicts the sampler over 1,024 rows of a 201,088 "
         "vocabulary (7.37 GiB "
         "activation; 1.87 with 256 rows, which would give +10.4%). The total is the table's GB10 figure "
         "(not in this log; 0.27+ logs on GB10 show 121.6-121.7)"),
    Case("localai_v0.19.1_phi3-mini_rtx3090_wsl.log", ("--model", "phi-3-mini", "--gpu", "rtx3090"), "0.19.1",
         "kv_pool", -0.0407,
         "the device total: this RTX 3090 runs under WSL2 (the repository's notes), where the total "
         "vLLM reads is not the 23.58 GiB of the table (native Linux): 0.85 x 23.58 - 7.12 weights leaves "
         "12.92 GiB, "
         "less than the logged 13.06 pool alone; weights exact, the graph estimate (0.51 GiB) rightly not "
         "deducted in 0.19"),
    Case("videocutting_v0.12.0_qwen3-30b-a3b_h100_tp2.log", ("--model", "qwen3-30b-a3b", *H100), "0.12.0",
         "kv_pool", 0.0095,
         "within 3%: non-torch the 0.25 GiB TP constant; this 0.12.0 log leaves 0.9 x 79.22 - 28.46 - 41.68 "
         "= 1.16 GiB per rank for activation (0.52 PREDICTED, sort path over 64 rows) + non-torch, so at "
         "most 0.64 here: the evidence that refuted applying the 0.19 sweep's 1.85 GiB H100 TP size to every "
         "era with a baseline (-3.1% with it); weights -0.0% per rank. H100 80GB HBM3 is named by the "
         "fused-MoE config path; the total is the table's 79.22"),
    Case("graphrag_v0.10.2_qwen3-4b_80gb.log", ("--model", "qwen3-4b"), "0.10.2", "kv_pool", 0.0008,
         "within 3%: all defaults on an unnamed 80 GB card (total 79.18 GiB logged, which also sets the "
         "scheduler tier: 8,192 tokens x 1,024 sequences); weights -0.8%, activation 5.56 PREDICTED vs 5.59 "
         "logged, non-torch 0.10 vs 0.07"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4.log",
         ("--model", "gpt-oss-20b", "--total-gib", "22.05", "--gpu-memory-utilization", "0.85",
          "--max-num-seqs", "256", "--max-num-batched-tokens", "4096"),
         "0.29.0", "kv_tokens", 0.8235,
         "the log gives only the token count (82,819 = 2.53x of 32,768: 0.21+ prints concurrency x "
         "max_model_len); with the predicted 2,312 blocks per request (2,048 full + 264 for the 128-token "
         "window and 4,096 batched tokens) of 393,216 B it implies a pool of about 2.14 GiB against 3.90 "
         "PREDICTED. Named: the weights, 12.85 PREDICTED unpadded because the L4 is not in the GPU table "
         "(--total-gib gives no compute capability), while the log says 'Using MARLIN Mxfp4 MoE backend', "
         "whose padded experts hold 13.70 (the A100 log's 13.72): 0.85 GiB. Not identified: the other "
         "~0.9 GiB (graphs are 1.20 for 51 sizes where the log captures 35; non-torch 0.10; the same "
         "file's nvidia-smi shows 18,604 MiB used, below the 18.74 GiB budget); the flags are the study's "
         "stated smoke config, the device total the L4's 22.05 GiB"),
    Case("akamas_v0.29.0_gpt-oss-20b_l4_kvfp8.log",
         ("--model", "gpt-oss-20b", "--total-gib", "22.05", "--gpu-memory-utilization", "0.85",
          "--max-num-seqs", "512", "--max-num-batched-tokens", "8192"),
         "0.29.0", "kv_tokens", 0.7060,
         "the same L4 study's second smoke configuration (fp8 KV, read from the log; 512 sequences, 8,192 "
         "batched tokens; block size 64, which explain cannot take and which changes the blocks per request "
         "by under 0.1%): 130,986 tokens = 4.00x implies a pool of about 1.88 GiB against 3.21 PREDICTED. "
         "Named: 0.85 GiB of unpadded MXFP4 weights, as in the first configuration (the log says MARLIN). "
         "Not identified: the other ~0.48 GiB (here the 51 predicted capture sizes are the log's own; "
         "activation 1.39 and non-torch 0.10 PREDICTED, neither logged)"),
    # llm-d-planner's measured sweep: full vLLM 0.19.0 logs on one H100 80GB (79.19 GiB) at DEBUG, so the
    # profile's own breakdown is logged; the checkpoints' shapes are the catalog's (Instruct = base shapes)
    Case(V19 + "llama31-8b_tp1.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_pool", 0.0005,
         "within 3%: weights -0.2%, activation 1.885 PREDICTED vs 1.89 logged (0.17+ samples the 1,024 "
         "dummy rows with the Triton top-k/top-p kernel: bf16 logits + fp32 copy + probs + q = 14 B per "
         "element, plus its kept 132-row buffer), the graph estimate rightly left out (0.19.0 logs it, does "
         "not deduct it); non-torch 0.25 is the 0.18-0.26 EMPIRICAL constant fitted on this sweep "
         "(in-sample: only weights and activation are independent here)",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "llama31-8b_tp2.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_pool", 0.0002,
         "activation 1.885 PREDICTED vs 1.89 logged on each rank (V1 all-gathers the logits, so both ranks "
         "run the sampler); non-torch 2.07 GiB logged per rank vs 2.1, the 0.18-0.26 TP constant fitted on "
         "this sweep's TP=2/4 H100 logs (in-sample; was 0.25 from 0.8-era logs: +2.9%)",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "llama31-8b_pp2.log", ("--model", "llama-3.1-8b", *H100), "0.19.0", "kv_tokens", 0.0006,
         "compared on tokens: only stage 0 logs its pool (66.54 GiB) while the token count follows the last "
         "stage's smaller one (75.23 - 7.51 - 2.01 - 0.07 = 65.64 GiB); that stage's activation 2.01 logged "
         "vs 2.01 PREDICTED (sampler + received intermediate tensors), non-torch 0.07 logged and fitted; "
         "stage 0's forward-only 1.10 logged vs 0.88 PREDICTED (not derived; it does not set the pool)",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "qwen25-7b_tp1.log", ("--model", "qwen2.5-7b", *H100), "0.19.0", "kv_pool", 0.0010,
         "within 3%: activation 2.205 PREDICTED vs 2.21 logged (Triton sampler over a 152,064 vocabulary), "
         "weights -0.5%; non-torch 0.24 logged vs the fitted 0.25",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "qwen3-8b_tp1.log", ("--model", "qwen3-8b", *H100), "0.19.0", "kv_pool", 0.0002,
         "within 3%: activation 2.213 PREDICTED vs 2.21 logged; non-torch 0.25 logged and fitted",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "gemma2-9b_tp1.log", ("--model", "gemma-2-9b", *H100), "0.19.0", "kv_pool", 0.0000,
         "within 3%: activation 3.643 PREDICTED vs 3.65 logged (Gemma-2's 256,000-row vocabulary: the "
         "Triton sampler's 14 B per element over 1,024 rows; the soft-capping's two bf16 temporaries are "
         "freed before it); the pages hold: 2 KV-cache groups (sliding window + global), tokens per pool "
         "GiB predicted 3,121 vs logged 3,120; non-torch 0.25 logged and fitted",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "phi4_tp1.log", ("--model", "phi-4", *H100), "0.19.0", "kv_pool", 0.0017,
         "within 3%: activation 1.518 PREDICTED vs 1.52 logged, weights -0.3%; non-torch 0.25 logged and "
         "fitted",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
    Case(V19 + "qwen25-72b_tp2.log", ("--model", "qwen2.5-72b", *H100), "0.19.0", "kv_pool", 0.0173,
         "within 3%: activation 2.292 PREDICTED vs 2.29 logged, weights -0.05 GiB (the catalog's base-model "
         "max_position 131,072 sizes the rotary cache at 32 MiB; the Instruct checkpoint's 32,768 would be "
         "8), "
         "non-torch 2.09 logged vs the fitted 2.1; on a pool of only 3.04 GiB (72B in bf16 over two H100s "
         "leaves 4% of the budget) 0.05 GiB is +1.7% (+2.8% without the rotary cache; with the 0.8-era 0.25 "
         "TP constant: +64%)",
         fitted="non-torch of 0.18-0.26 (fitted on this H100 sweep)"),
)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.log for c in CASES])
def test_config_alone_prediction_against_real_logs(case):
    out = explain_json(str(LOGS / case.log), *case.args)
    assert out["vllm_version"] == case.version
    row = out["rows"][case.row]
    assert row["logged"] is not None and row["predicted"] is not None
    error = row["predicted"] / row["logged"] - 1
    assert abs(error - case.error) <= 0.005, (case.log, error, out["terms"])
    # nothing the log measured went into the prediction: every term is PREDICTED or a stated input
    hows = {t["name"]: t["how"] for t in out["terms"]}
    assert all(
        hows[name] == "PREDICTED" for name in ("weights", "activation peak", "non-torch", "CUDA graphs")
    )
    assert hows["device total"] in ("given", "log")


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.log.startswith(V19) and "_pp" not in c.log], ids=lambda c: c.log
)
def test_dense_profile_activation_against_the_logged_torch_peak(case):
    """The 0.19.0 DEBUG logs state the profile run's torch peak ('torch peak memory increase: 1.89GiB', two
    decimals): the prediction from vLLM's source (Triton sampler over max_num_seqs rows) is within it."""
    out = explain_json(str(LOGS / case.log), *case.args)
    row = out["rows"]["activation"]
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
    out = explain_json(str(LOGS / log), *args)
    row = out["rows"]["weights"]
    assert abs(row["predicted"] - row["logged"]) <= 0.005, (log, row)


def summary_line(which: str, errors: list[float]) -> str:
    within = sum(e <= 0.03 for e in errors)
    return (
        f"{which}: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}, "
        f"{len(errors)} logs, {within} within 3%"
    )


def test_in_sample_cases_are_named_and_the_held_out_set_is_not_empty():
    """A log whose figures set an empirical constant cannot test that constant: each such Case says which,
    and the held-out logs remain to check the model on data it never saw."""
    fitted = [c for c in CASES if c.fitted]
    assert all(c.fitted.startswith("non-torch") for c in fitted)
    assert {c.log for c in fitted} >= {c.log for c in CASES if c.log.startswith(V19)}
    assert len(CASES) - len(fitted) >= 8


def test_print_config_alone_table(capsys):
    rows = [f"{'log':<58}{'vLLM':>8}{'row':>11}{'logged':>12}{'PREDICTED':>12}{'error':>9}  fitted here"]
    errors = []
    for case in CASES:
        out = explain_json(str(LOGS / case.log), *case.args)
        row = out["rows"][case.row]
        error = row["predicted"] / row["logged"] - 1
        errors.append(abs(error))
        digits = 0 if case.row in ("num_blocks", "kv_tokens") else 2
        rows.append(
            f"{case.log:<58}{case.version:>8}{case.row:>11}{row['logged']:>12,.{digits}f}"
            f"{row['predicted']:>12,.{digits}f}{error:>+9.1%}  {'yes' if case.fitted else '-'}"
        )
    rows.append(summary_line("all", errors))
    held_out = [e for e, case in zip(errors, CASES, strict=True) if not case.fitted]
    rows.append(summary_line("held out (no constant fitted on them)", held_out))
    with capsys.disabled():
        print("\n" + "\n".join(rows))
    assert len(errors) == len(CASES)


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
        (("-",), "hello\nworld\n", "memsight: not a SGLang or Ollama or vLLM startup log"),
        ((str(LOGS / "kvcached29_v0.9.2_free_memory_error.log"),), None,
         "memsight: vLLM died at start-up, before it printed its engine configuration (line 3): "
         "ValueError: Free"),
        ((str(LOGS / "gguf101_v0.18.0_compose_cut.log"),), None,
         "memsight: the log stops after the engine configuration, before the weights finished loading"),
        ((str(LOGS / "pr10511_v0.6.5dev_llama3-8b_h100_tp2_cut.log"),), None,
         "memsight: the log stops after the memory profile, before the KV cache was sized"),
        (("/nonexistent/vllm.log",), None, "memsight: /nonexistent/vllm.log: cannot read startup log: No"),
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


def test_binary_input_is_refused(tmp_path: pathlib.Path):
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    done = explain(str(blob))
    assert done.returncode == 2 and done.stderr == f"memsight: {blob}: binary data, not a text log\n"
