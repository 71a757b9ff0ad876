"""The workload behind the bundled demo recording: a small Llama-shaped decoder in torch on the CPU,
generating with a growing KV cache (a DynamicCache-like object: per-layer key/value lists), tracked by the
memsight agent (weights and KV buckets) with prefill/decode step marks. Run it under
`memsight run --headless --record FILE -- python collectors/data/demo_workload.py`.

The model's shape is read from demo_model_config.json beside this file (a Hugging Face-style config.json), the
same file the demo's plan is made from (demo_cpu_generate.json "plan"), so the two cannot drift apart.
"""

import json
import pathlib
import time

import torch

import collectors.agent as agent

torch.manual_seed(0)
CONFIG = json.loads((pathlib.Path(__file__).resolve().parent / "demo_model_config.json").read_text())
HIDDEN, LAYERS = CONFIG["hidden_size"], CONFIG["num_hidden_layers"]
HEADS, KV_HEADS = CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"]
VOCAB, FFN = CONFIG["vocab_size"], CONFIG["intermediate_size"]
HEAD_DIM = CONFIG["head_dim"]
assert HEAD_DIM * HEADS == HIDDEN and not CONFIG["tie_word_embeddings"]  # what the layers below assume
# (batch, prompt tokens, new tokens) of each round; the sidecar's plan uses the largest: 4 users x 576 tokens
ROUNDS = ((2, 256, 160), (4, 512, 64))


class Cache:
    """Per-layer key/value tensors grown by concatenation, like transformers 4.x DynamicCache."""

    def __init__(self) -> None:
        self.key_cache: list[torch.Tensor] = []
        self.value_cache: list[torch.Tensor] = []

    def update(self, k, v, layer):
        if len(self.key_cache) <= layer:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=2)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=2)
        return self.key_cache[layer], self.value_cache[layer]


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.gate = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.up = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.down = torch.nn.Linear(FFN, HIDDEN, bias=False)
        self.n1 = torch.nn.RMSNorm(HIDDEN)
        self.n2 = torch.nn.RMSNorm(HIDDEN)

    def forward(self, x, cache, index):
        b, n, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, n, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(b, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(h).view(b, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
        k, v = cache.update(k, v, index)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, HIDDEN))
        h = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = torch.nn.RMSNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids, cache):
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache, i)
        return self.head(self.norm(x[:, -1:]))


def main() -> None:
    agent.start()
    model = Model().eval()
    agent.track_model(model)
    # one line per phase on stdout: `memsight run` shows them in the Live screen's log panel
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params:,} fp32 parameters, {params * 4:,} bytes", flush=True)
    time.sleep(2)
    with torch.inference_mode():
        for batch, prompt, new_tokens in ROUNDS:
            cache = Cache()
            agent.track_kv(cache)
            agent.mark_step("prefill")
            print(f"batch {batch}: prefill {prompt} tokens, then decode {new_tokens}", flush=True)
            ids = torch.randint(0, VOCAB, (batch, prompt))
            logits = model(ids, cache)
            agent.mark_step("decode")
            for _ in range(new_tokens):
                ids = logits.argmax(-1)
                logits = model(ids, cache)
            agent.snap(f"batch {batch} after {prompt}+{new_tokens} tokens")
            print(f"batch {batch}: done, {prompt + new_tokens} tokens per sequence in the cache", flush=True)
            agent.untrack(cache)
            del cache, logits
            time.sleep(2)


if __name__ == "__main__":
    main()
