"""The tiny MoE training run the training tests share (imported by them, not collected).

2 layers, d_model 32, context 32, vocab 512, 4 experts top-2 of width 32, 300 stories of the
bundled sample, batch 8 (256 tokens a step). Each test file adds its budget and intervals.
"""

TINY_MOE_RUN = [
    "model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.d_ff=64", "model.max_seq_len=32",
    "model.moe={num_experts: 4, top_k: 2, d_expert: 32}",
    "data.source=sample", "data.max_train_stories=300",
    "train.batch_size=8", "train.lr=0.01", "train.eval_windows=8", "train.log_interval=1",
    "train.logging.progress=false",
]

TIMING_KEYS = ("tokens_per_s", "tokens_per_cpu_s", "flops_per_s", "mfu", "peak_flops_per_s",
               "wall_time_s", "train_time_s", "train_cpu_time_s", "step_time_s",
               "peak_memory_bytes")
"""Keys of metrics events and summaries that measure speed, not training: two runs of one
config and seed differ in them and in nothing else."""
