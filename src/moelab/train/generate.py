"""Text generation from a trained model: greedy or seeded sampling with temperature and top-k."""

from __future__ import annotations

import math

import torch

from moelab.errors import MoelabError
from moelab.model import Transformer

# Prompts of the samples written at the end of every run (TinyStories-style openings).
SAMPLE_PROMPTS = ("Once upon a time", "One day, a little girl named Lily", "The big dog")


MIN_TEMPERATURE = 1e-6
"""Below it, logits / temperature can overflow fp32 to inf and the softmax gives nan; 0 asks
for greedy decoding."""


@torch.no_grad()
def generate_tokens(model: Transformer, prompt_ids: list[int], max_new_tokens: int,
                    temperature: float = 1.0, top_k: int | None = None,
                    seed: int = 0) -> list[int]:
    """Append ``max_new_tokens`` tokens to ``prompt_ids``; temperature 0 means greedy.

    No KV cache: each step re-reads the last ``max_seq_len`` tokens, which is plenty fast for
    the short samples this is for. Sampling uses its own generator, so a seed gives the same
    text every time without touching the global RNG.
    """
    if not math.isfinite(temperature) or temperature < 0:  # nan or inf break the sampler
        raise MoelabError(f"temperature={temperature} is invalid: must be a finite number >= 0 "
                          f"(0 = greedy)")
    if 0 < temperature < MIN_TEMPERATURE:  # logits / temperature would overflow to inf - inf
        raise MoelabError(f"temperature={temperature} is invalid: allowed 0 (greedy) or "
                          f"{MIN_TEMPERATURE:g} and above")
    if top_k is not None and top_k <= 0:
        raise MoelabError(f"top_k={top_k} is invalid: must be > 0")
    if not prompt_ids:
        raise MoelabError("the prompt is empty: give at least one token")
    device = next(model.parameters()).device
    max_seq_len = model.cfg.max_seq_len
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens_1T = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        logits_V = model(tokens_1T[:, -max_seq_len:]).logits[0, -1].float()
        if temperature == 0:
            next_id = logits_V.argmax()
        else:
            logits_V = logits_V / temperature
            if top_k is not None and top_k < logits_V.numel():
                kth_largest = torch.topk(logits_V, top_k).values[-1]
                logits_V = logits_V.masked_fill(logits_V < kth_largest, float("-inf"))
            next_id = torch.multinomial(torch.softmax(logits_V, -1), 1, generator=generator)[0]
        tokens_1T = torch.cat([tokens_1T, next_id.view(1, 1)], dim=1)
    model.train(was_training)
    return tokens_1T[0].tolist()


def generate_text(model: Transformer, tokenizer, prompt: str, max_new_tokens: int = 64,
                  temperature: float = 1.0, top_k: int | None = None, seed: int = 0) -> str:
    """The prompt and its continuation as text.

    The prompt is preceded by the story separator, as every story is in the training stream,
    so the model sees it as the start of a new story.
    """
    prompt_ids = [tokenizer.eot_id] + tokenizer.encode(prompt)
    ids = generate_tokens(model, prompt_ids, max_new_tokens, temperature, top_k, seed)
    return tokenizer.decode(ids[1:])


def sample_text(model: Transformer, tokenizer, max_new_tokens: int = 32, seed: int = 0) -> str:
    """The samples.txt of a run: the first prompt continued greedily, every prompt sampled.

    Kept short (a few hundred forward passes without a KV cache) so it adds seconds, not
    minutes, to a run.
    """
    parts = [f"### {SAMPLE_PROMPTS[0]!r}, greedy\n"
             f"{generate_text(model, tokenizer, SAMPLE_PROMPTS[0], max_new_tokens, 0.0)}\n"]
    for prompt in SAMPLE_PROMPTS:
        sampled = generate_text(model, tokenizer, prompt, max_new_tokens, temperature=0.8,
                                top_k=50, seed=seed)
        parts.append(f"### {prompt!r}, temperature 0.8, top-k 50, seed {seed}\n{sampled}\n")
    return "\n".join(parts)
