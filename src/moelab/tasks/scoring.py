"""Score a model on the zero-shot tasks: log-likelihoods of continuations, accuracy, intervals.

Every task reduces to requests ``(context_ids, continuation_ids)``: the model reads the
context and the continuation and we sum log p(token) over the continuation's tokens and check
whether each of them is the argmax (greedy). Contexts start with ``<|endoftext|>``, as a story
does in the training stream. A request longer than the model's ``max_seq_len`` + 1 keeps its
last tokens (the context is cut from the left); a continuation longer than ``max_seq_len`` is
an error (the builder keeps them short: a run with max_seq_len 64 fits every task). Requests
are batched by length and right-padded: the model is causal and its MoE layers drop no tokens,
so padding changes no real position. Logits are fp32.

Accuracy intervals are Wilson score intervals at 95 % (``moelab.stats.intervals``), which keep
their coverage near 0 and 1 where the normal approximation does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F

from moelab.errors import MoelabError
from moelab.stats.intervals import CONFIDENCE, wilson_interval

CI_METHOD = "wilson"


@dataclass
class Continuation:
    """What the model thinks of one continuation given its context."""

    loglik: float
    """Sum of log p over the continuation's tokens (nats)."""
    num_tokens: int
    greedy: bool
    """Every continuation token is the argmax of its position's logits."""


@torch.no_grad()
def score_continuations(model, requests: list[tuple[list[int], list[int]]],
                        batch_size: int = 16) -> list[Continuation]:
    """One ``Continuation`` per (context_ids, continuation_ids), in the order given."""
    max_seq_len = model.cfg.max_seq_len
    device = next(model.parameters()).device
    longest = max((len(continuation) for _, continuation in requests), default=0)
    if longest > max_seq_len:
        raise MoelabError(f"the longest continuation has {longest} tokens, more than the "
                          f"model's max_seq_len={max_seq_len}: the task needs a run with "
                          f"max_seq_len >= {longest}")
    windows = []  # (input ids, index of the first continuation target in them, targets)
    for context, continuation in requests:
        if not continuation or not context:
            raise ValueError("a request needs at least one context and one continuation token")
        ids = (context + continuation)[-(max_seq_len + 1):]
        windows.append((ids[:-1], len(ids) - 1 - len(continuation), continuation))
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i][0]))
    results: list[Continuation | None] = [None] * len(windows)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        width = len(windows[batch[0]][0])
        tokens_BT = torch.zeros(len(batch), width, dtype=torch.long)
        for row, i in enumerate(batch):
            tokens_BT[row, :len(windows[i][0])] = torch.tensor(windows[i][0])
        logits_BTV = model(tokens_BT.to(device)).logits.float()
        logprobs_BTV = F.log_softmax(logits_BTV, dim=-1).cpu()
        for row, i in enumerate(batch):
            _, first, targets = windows[i]
            rows_CV = logprobs_BTV[row, first:first + len(targets)]
            targets_C = torch.tensor(targets)
            loglik = rows_CV.gather(1, targets_C[:, None]).sum().item()
            greedy = bool((rows_CV.argmax(dim=1) == targets_C).all())
            results[i] = Continuation(loglik, len(targets), greedy)
    return cast(list[Continuation], results)  # every slot filled above


def accuracy_summary(correct: int, items: int, chance: float) -> dict:
    """Accuracy with its Wilson 95 % interval and the chance level."""
    interval = wilson_interval(correct, items, CONFIDENCE)
    return {"items": items, "correct": correct, "accuracy": correct / items,
            "ci_low": interval.low, "ci_high": interval.high,
            "ci": f"{CI_METHOD} {CONFIDENCE:.0%}", "chance": chance}


# --------------------------------------------------------------------------------------------
# The tasks
# --------------------------------------------------------------------------------------------


def score_last_word(model, tokenizer, items: list[dict], batch_size: int = 16) -> dict:
    """Greedy exact match of the target word's tokens (lm-evaluation-harness's LAMBADA ``acc``).

    Chance: a guesser uniform over the vocabulary, token by token: mean of V^-(target tokens).
    """
    scored = score_continuations(model, last_word_requests(tokenizer, items), batch_size)
    correct = sum(s.greedy for s in scored)
    chance = sum(tokenizer.vocab_size ** -s.num_tokens for s in scored) / len(scored)
    return {"metric": "greedy exact match of the last word",
            **accuracy_summary(correct, len(items), chance)}


def score_ending(model, tokenizer, items: list[dict], batch_size: int = 16) -> dict:
    """The true last sentence against the distractors, ranked by mean log-likelihood per token.

    ``accuracy_total_loglik`` ranks by the summed log-likelihood instead (favours short
    endings). Ties count as wrong. Chance: 1 / number of endings.
    """
    scored = score_continuations(model, ending_requests(tokenizer, items), batch_size)
    correct_mean = correct_total = first = 0
    for item in items:  # the requests are each item's endings, item after item
        options = scored[first:first + len(item["endings"])]
        first += len(item["endings"])
        correct_mean += _strictly_best(item["label"], [s.loglik / s.num_tokens for s in options])
        correct_total += _strictly_best(item["label"], [s.loglik for s in options])
    chance = sum(1 / len(item["endings"]) for item in items) / len(items)
    return {"metric": "true ending ranked first by mean log-likelihood per token",
            **accuracy_summary(correct_mean, len(items), chance),
            "accuracy_total_loglik": correct_total / len(items)}


def score_agreement(model, tokenizer, items: list[dict], batch_size: int = 16) -> dict:
    """The grammatical sentence gets the higher total log-likelihood (BLiMP); ties count as wrong.

    Each sentence is scored on its own, after ``<|endoftext|>``. Chance: 0.5. Also per
    phenomenon (``by_phenomenon``).
    """
    scored = score_continuations(model, agreement_requests(tokenizer, items), batch_size)
    wins = [scored[2 * n].loglik > scored[2 * n + 1].loglik for n in range(len(items))]
    by_phenomenon = {}
    for phenomenon in sorted({item["phenomenon"] for item in items}):
        hits = [w for w, item in zip(wins, items) if item["phenomenon"] == phenomenon]
        by_phenomenon[phenomenon] = accuracy_summary(sum(hits), len(hits), 0.5)
    return {"metric": "grammatical sentence more likely than its twin (total log-likelihood)",
            **accuracy_summary(sum(wins), len(items), 0.5), "by_phenomenon": by_phenomenon}


def _strictly_best(label: int, values: list[float]) -> bool:
    return all(values[label] > v for k, v in enumerate(values) if k != label)


# --------------------------------------------------------------------------------------------
# What each task asks the model: (context ids, continuation ids) per request
# --------------------------------------------------------------------------------------------

Request = tuple[list[int], list[int]]


def last_word_requests(tokenizer, items: list[dict]) -> list[Request]:
    """The story up to its last word, then the word."""
    return [([tokenizer.eot_id] + tokenizer.encode(item["context"]),
             tokenizer.encode(item["target"])) for item in items]


def ending_requests(tokenizer, items: list[dict]) -> list[Request]:
    """The story without its last sentence, then each ending, item after item."""
    requests: list[Request] = []
    for item in items:
        context = [tokenizer.eot_id] + tokenizer.encode(item["context"])
        requests.extend((context, tokenizer.encode(ending)) for ending in item["endings"])
    return requests


def agreement_requests(tokenizer, items: list[dict]) -> list[Request]:
    """Each pair's grammatical sentence, then its twin, each after ``<|endoftext|>`` alone."""
    requests: list[Request] = []
    for item in items:
        requests.append(([tokenizer.eot_id], tokenizer.encode(item["good"])))
        requests.append(([tokenizer.eot_id], tokenizer.encode(item["bad"])))
    return requests


SCORERS = {"last_word": score_last_word, "ending": score_ending, "agreement": score_agreement}
REQUESTS = {"last_word": last_word_requests, "ending": ending_requests,
            "agreement": agreement_requests}
