"""The typed config sections: ``model`` (with ``model.moe``), ``data`` and ``train``, each
field documented where it is defined, and each section's ``validate`` (one-line ConfigErrors).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal, Optional

from moelab.config.checks import is_sha256, require_non_negative, require_positive
from moelab.errors import ConfigError, short_repr


LbScope = Literal["micro_batch", "global_batch"]
"""The model.moe.lb_scope names (the parser refuses any other, naming these)."""
BalanceMode = Literal["aux_loss", "bias", "both"]
"""The model.moe.balance names."""


@dataclass
class MoEConfig:
    """Mixtral-style routed experts replacing every dense FFN."""

    num_experts: int = 4
    """Number of routed experts E per layer."""
    top_k: int = 2
    """Experts each token is sent to (k); sparsity S = (E - k) / E."""
    d_expert: int = 344
    """Hidden size of each expert's SwiGLU FFN."""
    lb_coef: float = 0.01
    """Weight of the Switch load-balancing loss (balanced routing scores 1)."""
    z_coef: float = 0.001
    """Weight of the router z-loss, mean logsumexp(logits)^2."""
    norm_topk_prob: Optional[bool] = None
    """Renormalise each token's k routing weights to sum 1 (Mixtral) or keep the raw softmax
    probabilities (Switch). null: renormalise when top_k > 1, raw when top_k = 1 -- one
    renormalised weight is always 1, so a top-1 router would get no gradient from the task loss."""
    lb_scope: LbScope = "micro_batch"
    """Tokens the balancing loss counts its loads f_i over: micro_batch (each micro batch of
    each process on its own) or global_batch (the whole optimizer step: every micro batch of
    every process). docs/training.md, "Balancing scope"."""
    balance: BalanceMode = "aux_loss"
    """How routing is kept balanced: aux_loss (the Switch loss, weight lb_coef), bias
    (DeepSeek-V3's aux-loss-free per-expert bias on the top-k choice; no balancing loss in the
    objective) or both. docs/training.md, "Aux-loss-free balancing"."""
    bias_update_rate: float = 0.001
    """Step u of the bias update after every optimizer step, b_i += u * sign(mean load -
    load_i) (balance bias or both)."""
    num_shared_experts: int = 0
    """Always-on SwiGLU experts every token goes through besides its k routed ones, their
    outputs added to the routed output (DeepSeekMoE); 0: none (Mixtral)."""
    d_shared: Optional[int] = None
    """Hidden size of each shared expert; null: d_expert. The shared experts run as one SwiGLU
    of hidden size num_shared_experts * d_shared (the same function)."""

    def validate(self, prefix: str = "model.moe") -> None:
        require_positive(self, prefix, "num_experts", "top_k", "d_expert")
        require_non_negative(self, prefix, "lb_coef", "z_coef", "bias_update_rate",
                              "num_shared_experts")
        if self.d_shared is not None:
            require_positive(self, prefix, "d_shared")
        if self.top_k > self.num_experts:
            raise ConfigError(
                f"{prefix}.top_k={self.top_k} is invalid: allowed 1..num_experts "
                f"({self.num_experts})"
            )

    @property
    def sparsity(self) -> float:
        return (self.num_experts - self.top_k) / self.num_experts

    @property
    def uses_aux_loss(self) -> bool:
        """Whether the Switch balancing loss (times lb_coef) is part of the objective."""
        return self.balance in ("aux_loss", "both")

    @property
    def uses_expert_bias(self) -> bool:
        """Whether routing adds the per-expert balancing bias to its top-k choice."""
        return self.balance in ("bias", "both")

    @property
    def shared_hidden(self) -> int:
        """Hidden size of the fused shared SwiGLU, num_shared_experts * d_shared (0: none)."""
        return self.num_shared_experts * (self.d_expert if self.d_shared is None
                                          else self.d_shared)

    def fine_grained(self, granularity: int) -> MoEConfig:
        """Each routed expert split into ``granularity`` experts of d_expert / granularity, and
        ``granularity`` times as many chosen per token (DeepSeekMoE's fine-grained experts;
        the granularity of Abnar et al. relative to this config): the same total and active
        expert parameters and FLOPs, only the router grows to E * granularity outputs. The
        shared experts stay as they are (d_shared resolved, so it does not shrink)."""
        if not isinstance(granularity, int) or granularity <= 0 or self.d_expert % granularity:
            raise ConfigError(
                f"granularity={short_repr(granularity)} is invalid: must be a positive integer dividing "
                f"d_expert ({self.d_expert})")
        return dataclasses.replace(
            self, num_experts=self.num_experts * granularity, top_k=self.top_k * granularity,
            d_expert=self.d_expert // granularity,
            d_shared=self.d_expert if self.d_shared is None and self.num_shared_experts
            else self.d_shared)

    @property
    def renormalizes_weights(self) -> bool:
        """Whether routing renormalises the k weights (``norm_topk_prob`` resolved)."""
        return self.top_k > 1 if self.norm_topk_prob is None else self.norm_topk_prob


@dataclass
class ModelConfig:
    """A LLaMA-style decoder; the FFN is dense SwiGLU, or routed experts when ``moe`` is set."""

    vocab_size: int = 4096
    """Tokens in the vocabulary (must equal the tokenizer's)."""
    d_model: int = 256
    """Width of the residual stream."""
    n_layers: int = 6
    """Number of transformer blocks."""
    n_heads: int = 8
    """Attention (query) heads; d_model must be divisible by it."""
    n_kv_heads: int = 8
    """Key/value heads; grouped-query attention when < n_heads."""
    d_ff: int = 688
    """Hidden size of a dense SwiGLU FFN (unused by MoE layers)."""
    max_seq_len: int = 256
    """Context length in tokens."""
    tie_embeddings: bool = True
    """Share the token-embedding matrix with the output head."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal init; residual output projections get init_std / sqrt(2 n_layers)."""
    embedding_init_std: Optional[float] = None
    """Std of the token-embedding init; null means init_std. 1.0 with logit_scale
    d_model**-0.5 is T5's tied head (docs/recipe.md)."""
    logit_scale: float = 1.0
    """Fixed multiplier of the output logits (of the final normed hidden state)."""
    moe: Optional[MoEConfig] = None
    """Routed experts; null for a dense model."""

    def validate(self, prefix: str = "model") -> None:
        require_positive(
            self, prefix, "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads",
            "d_ff", "max_seq_len", "rope_theta", "norm_eps", "init_std", "logit_scale",
        )
        if self.embedding_init_std is not None and not self.embedding_init_std > 0:
            raise ConfigError(f"{prefix}.embedding_init_std={self.embedding_init_std} is invalid: "
                              f"must be > 0 (or null for init_std)")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"{prefix}.d_model={self.d_model} is invalid: must be divisible by "
                f"n_heads ({self.n_heads})"
            )
        if (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"{prefix}.n_heads={self.n_heads} is invalid: head_dim d_model/n_heads = "
                f"{self.d_model // self.n_heads} must be even for RoPE"
            )
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"{prefix}.n_kv_heads={self.n_kv_heads} is invalid: must divide "
                f"n_heads ({self.n_heads})"
            )
        if self.moe is not None:
            self.moe.validate(f"{prefix}.moe")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class DataConfig:
    """Where the text comes from and how it is tokenized (see docs/data.md)."""

    source: str = "sample"
    """'sample' (bundled TinyStories), 'tinystories' (TinyStories: the local copy $MOELAB_DATA
    names, else roneneldan/TinyStories from the hub), 'hf' (the hub), 'hf:NAME' (any Hugging
    Face dataset, streamed), 'adaptation' (the bundled fine-tuning text: docs/data.md, "The
    adaptation set"), a folder with train.txt and valid.txt, a datasets save_to_disk folder,
    or one .txt (stories separated by <|endoftext|> lines), .jsonl, .parquet or .arrow file."""
    vocab_size: Optional[int] = None
    """BPE vocabulary size to train; null means model.vocab_size."""
    cache_dir: Optional[str] = None
    """Where tokenizers and token caches live; null means $MOELAB_CACHE/data, else
    $XDG_CACHE_HOME/moelab/data, else ~/.cache/moelab/data."""
    valid_fraction: float = 0.05
    """Share of stories held out for validation when the source is a single file (or a
    dataset without a validation split)."""
    max_train_stories: Optional[int] = None
    """Use only the first N training stories (null: all); of a streamed hub dataset, the cap
    that lets a laptop take a slice."""
    text_field: Optional[str] = None
    """The column holding the text of a dataset source (hf:NAME, .parquet, .arrow, a
    save_to_disk folder); null means 'text', else 'story'."""
    hf_config: Optional[str] = None
    """The configuration (subset) of an hf:NAME dataset, e.g. sample-10BT; null: its default."""
    train_split: str = "train"
    """The split of a dataset source to train on."""
    valid_split: Optional[str] = None
    """The split of a dataset source to validate on; null means validation, valid or test,
    whichever it has, else a valid_fraction slice held out of the training split."""

    def validate(self, prefix: str = "data") -> None:
        if not self.source:
            raise ConfigError(f"{prefix}.source='' is invalid: use sample, tinystories, hf, "
                              "hf:NAME, adaptation or a path")
        if self.cache_dir is not None and not self.cache_dir.strip():
            raise ConfigError(f"{prefix}.cache_dir={short_repr(self.cache_dir)} is invalid: expected a "
                              f"folder, or null for the default cache")
        # 256 byte symbols + <|endoftext|> .. the cap (moelab.data.tokenizer.MIN/MAX_VOCAB_SIZE).
        if self.vocab_size is not None and self.vocab_size < 257:
            raise ConfigError(f"{prefix}.vocab_size={self.vocab_size} is invalid: must be >= 257")
        if self.vocab_size is not None and self.vocab_size > 1 << 20:
            raise ConfigError(f"{prefix}.vocab_size={self.vocab_size} is invalid: allowed "
                              f"257..{1 << 20}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(
                f"{prefix}.valid_fraction={self.valid_fraction} is invalid: allowed (0, 1)"
            )
        if self.max_train_stories is not None and self.max_train_stories <= 0:
            raise ConfigError(
                f"{prefix}.max_train_stories={self.max_train_stories} is invalid: must be > 0"
            )
        for name in ("text_field", "hf_config", "train_split", "valid_split"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{prefix}.{name}={short_repr(value)} is invalid: expected a "
                                  "non-empty name" + ("" if name == "train_split" else ", or null"))
        if self.valid_split is not None and self.valid_split == self.train_split:
            raise ConfigError(f"{prefix}.valid_split={short_repr(self.valid_split)} is invalid: it "
                              f"is the training split; name another split, or null to hold out "
                              f"data.valid_fraction of it")


# The train.device names (moelab.train.distributed resolves them to a torch device).
DEVICE_NAME = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N"

MAX_TOKENS = 10**15
"""A sanity cap on train.max_tokens: a budget above it cannot finish on any machine."""
MAX_SEED = 2**63 - 1
"""torch.manual_seed's range."""
MAX_SAMPLE_TOKENS = 100_000
"""A sanity cap on train.sample_tokens: the end-of-run sample is generated token by token."""
EVAL_TASK_NAMES = ("last_word", "ending", "agreement")
"""The zero-shot tasks of moelab.tasks (named here so a config can be checked without them)."""
ScheduleName = Literal["cosine", "wsd"]
"""The train.schedule names (moelab.train.schedule computes their lr)."""
DecayShape = Literal["linear", "sqrt"]
"""The train.decay_shape names of the wsd final decay."""
Dtype = Literal["float32", "bfloat16"]
Numerics = Literal["portable", "compatible", "native"]
"""The train.dtype names: float32, or bfloat16 autocast."""


@dataclass
class LoggingConfig:
    """How a run is shown (its progress bar, TensorBoard, W&B), never what it computes: a
    resumed run, a branch and a rerun study may differ in it, and a run's identity (the config
    a study or sweep folder compares, ``without_logging``) leaves it out."""

    progress: bool = True
    """Show a progress bar (loss, tokens/s, ETA) when stderr is a terminal."""
    tensorboard: bool = False
    """Also log to TensorBoard in RUN/tensorboard (needs the tensorboard package)."""
    wandb: bool = False
    """Also log to Weights & Biases, offline unless WANDB_MODE says otherwise (needs wandb).
    The W&B run id is kept in RUN/wandb.json: --resume continues the same W&B run."""
    wandb_project: Optional[str] = None
    """The W&B project; null: $WANDB_PROJECT, else 'moelab'."""
    wandb_entity: Optional[str] = None
    """The W&B team or user; null: $WANDB_ENTITY, else the account's default."""
    wandb_group: Optional[str] = None
    """The W&B group; null: none for a lone run, the folder's name for a study or sweep (its
    plan sets it), so that its runs show together."""
    wandb_name: Optional[str] = None
    """The W&B run name; null: the run folder's name (a study or sweep sets the run's name in
    its plan: moe/seed0, s1/S0.5/D409600)."""
    wandb_tags: list[str] = field(default_factory=list)
    """W&B tags; a study or sweep adds its run's labels (arm=moe, seed=0, sparsity=0.5, ...)."""

    def validate(self, prefix: str = "train.logging") -> None:
        for name in ("wandb_project", "wandb_entity", "wandb_group", "wandb_name"):
            value = getattr(self, name)
            if value is not None and (not 0 < len(value.strip()) <= 128
                                      or not value.isprintable()):
                raise ConfigError(f"{prefix}.{name}={short_repr(value)} is invalid: allowed 1 to "
                                  "128 printable characters on one line, or null")
        if (any(not 0 < len(tag.strip()) <= 64 or not tag.isprintable()
                for tag in self.wandb_tags)
                or len(set(self.wandb_tags)) < len(self.wandb_tags)):
            raise ConfigError(f"{prefix}.wandb_tags={short_repr(self.wandb_tags)} is invalid: "
                              "allowed distinct tags of 1 to 64 printable characters on one line "
                              "(W&B's limit)")


@dataclass
class TrainConfig:
    """Optimisation, budget, evaluation and checkpointing of one run."""

    seed: int = 0
    """Seed of the weight init (and of the data order unless data_seed is set)."""
    data_seed: Optional[int] = None
    """Seed of the training-batch order; null means seed."""
    batch_size: int = 32
    """Sequences per optimizer step, global over all ranks and accumulation steps."""
    micro_batch_size: Optional[int] = None
    """Sequences per forward pass on one rank; null means batch_size / world size."""
    max_tokens: int = 1_000_000
    """Training budget in tokens; steps = max_tokens // (batch_size * max_seq_len), rounded down."""
    lr: float = 3e-3
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """Floor the decay ends on (the last step), as a fraction of lr."""
    warmup_fraction: float = 0.05
    """Share of the steps spent in linear warmup."""
    schedule: ScheduleName = "cosine"
    """'cosine' (warmup, then cosine to the floor) or 'wsd' (warmup, constant lr, final decay)."""
    decay_fraction: float = 0.2
    """wsd only: share of the steps in the final decay to the floor."""
    decay_shape: DecayShape = "sqrt"
    """wsd only: 'linear' or 'sqrt' (the 1 - sqrt(t) cooldown of Hägele et al. 2024)."""
    warmup_steps: Optional[int] = None
    """Steps of linear warmup, replacing warmup_fraction when set: the runs of a wsd budget
    family share one warmup, so their schedules agree before each decay (moelab.train.budgets)."""
    keep_checkpoints_at: list[int] = field(default_factory=list)
    """Steps whose checkpoint is kept beside the latest one (a wsd family's decay starts, which
    its cooldown branches start from)."""
    init_from: Optional[str] = None
    """A checkpoint folder whose weights a fresh run starts from instead of a random init (set
    by ``moelab finetune``); its model.safetensors must have the sha256 init_sha256."""
    init_sha256: Optional[str] = None
    """sha256 of init_from's model.safetensors, checked before the weights are loaded."""
    weight_decay: float = 0.1
    """AdamW decay, applied to matrices only."""
    beta1: float = 0.9
    """AdamW's first-moment decay."""
    beta2: float = 0.95
    """AdamW's second-moment decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    eval_interval: int = 100
    """Evaluate every N optimizer steps (and at the end)."""
    eval_windows: int = 64
    """Validation windows of max_seq_len tokens, fixed for every arm and seed."""
    checkpoint_interval: int = 0
    """Save a resumable checkpoint every N steps (0: only at the end)."""
    log_interval: int = 10
    """Log train metrics every N steps."""
    dtype: Dtype = "float32"
    """'float32' or 'bfloat16' (autocast)."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    device: str = "auto"
    """'auto', 'cpu', 'cuda' or 'cuda:N' (whether that GPU exists is checked when training starts:
    a run may be planned on a machine without it)."""
    numerics: Numerics = "portable"
    """CPU kernels pinned so other x86 machines give the same losses (moelab.numerics):
    'portable' (AVX2 paths), 'compatible' (also MKL's vendor-neutral GEMM) or 'native'."""
    collapse_threshold: float = 0.9
    """Flag routing collapse when one expert takes more than this share of token slots."""
    peak_flops: Optional[float] = None
    """The peak MFU divides by: on a GPU FLOP/s, on a CPU FLOPs per CPU-second (one thread's
    rate); null: looked up for a known GPU (bf16 dense), measured once per machine with
    matmuls on a CPU and cached (docs/training.md, "Throughput and MFU")."""
    sample_tokens: int = 32
    """Tokens generated per prompt for samples.txt at the end of a run (0: no samples)."""
    eval_tasks: list[str] = field(default_factory=list)
    """Zero-shot tasks (moelab.tasks) scored at the end of the run; empty: none."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """How the run is shown: progress bar, TensorBoard, W&B (never what it computes)."""

    def validate(self, prefix: str = "train") -> None:
        require_positive(self, prefix, "batch_size", "max_tokens", "lr", "eval_interval",
                          "eval_windows", "log_interval")
        if self.max_tokens > MAX_TOKENS:
            raise ConfigError(f"{prefix}.max_tokens={self.max_tokens} is invalid: allowed up to "
                              f"{MAX_TOKENS:.0e} (a sanity cap, 50x the largest training runs)")
        require_non_negative(self, prefix, "weight_decay", "grad_clip", "checkpoint_interval",
                              "min_lr_ratio", "warmup_fraction", "sample_tokens", "seed")
        if self.data_seed is not None and self.data_seed < 0:
            raise ConfigError(f"{prefix}.data_seed={self.data_seed} is invalid: must be >= 0")
        if self.micro_batch_size is not None and self.micro_batch_size <= 0:
            raise ConfigError(
                f"{prefix}.micro_batch_size={self.micro_batch_size} is invalid: must be > 0"
            )
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(
                    f"{prefix}.{name}={getattr(self, name)} is invalid: allowed [0, 1)"
                )
        if self.min_lr_ratio > 1.0 or self.warmup_fraction >= 1.0:
            raise ConfigError(
                f"{prefix}.min_lr_ratio/warmup_fraction = {self.min_lr_ratio}/"
                f"{self.warmup_fraction} is invalid: allowed [0, 1] and [0, 1)"
            )
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ConfigError(
                f"{prefix}.decay_fraction={self.decay_fraction} is invalid: allowed (0, 1]"
            )
        self._validate_budget_family_fields(prefix)
        if (self.schedule == "wsd" and self.warmup_steps is None
                and self.warmup_fraction + self.decay_fraction > 1.0):
            raise ConfigError(
                f"{prefix}.decay_fraction={self.decay_fraction} is invalid with wsd and "
                f"warmup_fraction={self.warmup_fraction}: allowed (0, 1 - warmup_fraction]"
            )
        if not DEVICE_NAME.fullmatch(self.device):
            raise ConfigError(
                f"{prefix}.device={short_repr(self.device)} is invalid: allowed {DEVICE_CHOICES}")
        if not 0.0 < self.collapse_threshold <= 1.0:
            raise ConfigError(
                f"{prefix}.collapse_threshold={self.collapse_threshold} is invalid: allowed (0, 1]"
            )
        if self.peak_flops is not None and not (isinstance(self.peak_flops, (int, float))
                                                and 0 < self.peak_flops < float("inf")):
            raise ConfigError(f"{prefix}.peak_flops={short_repr(self.peak_flops)} is invalid: "
                              "expected FLOP/s > 0 (e.g. 989e12), or null to detect it")
        self.logging.validate(f"{prefix}.logging")
        if (any(name not in EVAL_TASK_NAMES for name in self.eval_tasks)
                or len(set(self.eval_tasks)) < len(self.eval_tasks)):
            raise ConfigError(f"{prefix}.eval_tasks={short_repr(self.eval_tasks)} is invalid: allowed a "
                              f"list of distinct names from {', '.join(EVAL_TASK_NAMES)}")

    def _validate_budget_family_fields(self, prefix: str) -> None:
        """warmup_steps, keep_checkpoints_at, init_from/init_sha256 (their bounds against the
        run's steps are checked when the steps are known, ``StepPlan``)."""
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ConfigError(f"{prefix}.warmup_steps={self.warmup_steps} is invalid: must be "
                              f">= 0, or null for warmup_fraction")
        bad = [s for s in self.keep_checkpoints_at if s < 1]
        if bad or len(set(self.keep_checkpoints_at)) < len(self.keep_checkpoints_at):
            raise ConfigError(f"{prefix}.keep_checkpoints_at={self.keep_checkpoints_at} is "
                              f"invalid: allowed distinct steps >= 1")
        if (self.init_from is None) != (self.init_sha256 is None):
            raise ConfigError(f"{prefix}.init_from={short_repr(self.init_from)} with init_sha256="
                              f"{short_repr(self.init_sha256)} is invalid: set both or neither")
        if self.init_sha256 is not None and not is_sha256(self.init_sha256):
            raise ConfigError(f"{prefix}.init_sha256={short_repr(self.init_sha256)} is invalid: expected "
                              f"64 lowercase hex digits")
        for name in ("seed", "data_seed"):
            value = getattr(self, name)
            if value is not None and value > MAX_SEED:  # torch.manual_seed takes 64 bits
                raise ConfigError(f"{prefix}.{name}={value} is invalid: allowed 0..2^63-1")
        if self.sample_tokens > MAX_SAMPLE_TOKENS:
            raise ConfigError(f"{prefix}.sample_tokens={self.sample_tokens} is invalid: allowed "
                              f"0..{MAX_SAMPLE_TOKENS:,} (the end-of-run sample, generated "
                              f"token by token)")

    @property
    def effective_data_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> Config:
        self.model.validate("model")
        self.data.validate("data")
        self.train.validate("train")
        if self.data.vocab_size is not None and self.data.vocab_size != self.model.vocab_size:
            raise ConfigError(
                f"data.vocab_size={self.data.vocab_size} is invalid: must equal "
                f"model.vocab_size ({self.model.vocab_size}) or be null"
            )
        return self

    @property
    def tokenizer_vocab_size(self) -> int:
        return self.data.vocab_size or self.model.vocab_size
