"""An ordinary transformers generate script, with no memsight code in it: a tiny Llama-shaped model (its
config.json beside this file, random weights) built with AutoModelForCausalLM.from_config, generating greedily
on the CPU with the default DynamicCache. `memsight run` tracks its weights, KV cache and prefill/decode
activation peaks automatically. The bundled demo recording demo_transformers_generate.jsonl was made with

    memsight run --headless --record collectors/data/demo_transformers_generate.jsonl --hz 4 \\
        -- python collectors/data/demo_transformers_generate.py

and tests/collectors/test_autotrack_run.py runs it the same way.
"""

import argparse
import json
import pathlib
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.generation.streamers import BaseStreamer

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--prompt", type=int, default=32)
parser.add_argument("--new", type=int, default=480)
parser.add_argument("--rounds", type=int, default=1)
parser.add_argument("--hold", type=float, default=1.0, help="seconds to wait after generating")
parser.add_argument("--token-delay", type=float, default=0.0, help="seconds a reader takes per token")
args = parser.parse_args()


class PacedReader(BaseStreamer):
    """A streamer that reads each new token slowly, as a client on the other end of a stream would."""

    def put(self, value):
        time.sleep(args.token_delay)

    def end(self):
        pass


here = pathlib.Path(__file__).resolve().parent
config = LlamaConfig(**json.loads((here / "demo_transformers_config.json").read_text()))
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config).eval()
print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
for r in range(args.rounds):
    ids = torch.randint(0, config.vocab_size, (args.batch, args.prompt))
    t0 = time.time()
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=args.new,
            min_new_tokens=args.new,
            do_sample=False,
            streamer=PacedReader() if args.token_delay else None,
        )
    print(f"round {r}: {tuple(out.shape)} in {time.time() - t0:.1f} s", flush=True)
time.sleep(args.hold)
