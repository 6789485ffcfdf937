"""Mixtral-style routed experts: routing, the layer, the experts implementations, CPU kernels.

One MoE layer replaces the dense SwiGLU FFN of a block. Read in this order:

- ``routing.py``: **route** and the losses. ``router_logits_TE = x_TD @ router.T`` in fp32;
  softmax over all E experts, keep the top-k, renormalise those k weights to sum 1 (Mixtral).
  With top-1 the weight is the raw softmax probability instead (Switch), unless the config says
  otherwise: a single renormalised weight is always 1 and the router would learn nothing from
  the task loss. The Switch balancing loss (normalised so a balanced router scores 1), the
  router z-loss and the summable ``RoutingStats`` are pure functions of the logits and the
  chosen experts; ``route`` shares one softmax and one slot count between the weights and both
  losses. It also takes the loads of a whole optimizer step for the balancing loss
  (``lb_scope: global_batch``) and a per-expert bias on the top-k choice alone (``balance:
  bias``, DeepSeek-V3's aux-loss-free balancing; the layer holds it as a buffer). One
  implementation, used by the layer and by the tests.
- ``layer.py``: ``MoEFeedForward`` = router + an experts implementation (+ the shared
  experts, ``model.moe.num_shared_experts``: one always-on SwiGLU the model passes in, added to
  the routed output). ``forward`` returns ``(y, MoEAux)``, as the dense FFN returns ``(y, None)``; nothing is
  stashed on the module. The statistics are skipped when the caller does not want them
  (training).
- ``experts.py``: the experts implementations behind one registry: ``reference`` (the plain
  loop over experts the tests hold every other one equal to), ``sorted`` and ``grouped``; the
  layer's default ``auto`` runs ``grouped`` on an sm90 or sm100 GPU in bf16 and ``sorted``
  elsewhere.
- ``kernels.py``: what ``sorted`` runs on: dropless dispatch (the T*k token-slots stably sorted
  by expert id, every expert on all of its rows, no capacity limit, a deterministic combine),
  one hand-written autograd node, and the per-expert segment products registered as custom ops
  so torch.compile compiles the layer once, whatever the routing.
- ``grouped.py``: the GPU path: ``torch._grouped_mm`` on a padded expert-major buffer whose
  layout and group offsets stay on the device (no host sync, static shapes).

Measurements behind the kernels' choices: BENCHMARKS.md ("MoE dispatch", "Train step").

Shape suffixes: B batch, T tokens (flattened B*T inside the layer), D d_model, E experts,
K top-k, H d_expert (hidden size of one expert), S = T*K token-slots, R = S rows of the
expert-major buffer (the same slots, sorted by expert).
"""

from moelab.moe.experts import EXPERTS_IMPLEMENTATIONS, reference_experts_forward
from moelab.moe.grouped import grouped_experts_forward
from moelab.moe.kernels import sorted_experts_forward
from moelab.moe.layer import MoEAux, MoEFeedForward
from moelab.moe.routing import (
    LoadBalance,
    Routing,
    RoutingStats,
    load_balance,
    load_balancing_loss,
    max_violation,
    route,
    router_logits,
    router_z_loss,
    routing_stats,
)

__all__ = [
    "EXPERTS_IMPLEMENTATIONS",
    "LoadBalance",
    "grouped_experts_forward",
    "MoEAux",
    "MoEFeedForward",
    "Routing",
    "RoutingStats",
    "load_balance",
    "load_balancing_loss",
    "max_violation",
    "reference_experts_forward",
    "route",
    "router_logits",
    "router_z_loss",
    "routing_stats",
    "sorted_experts_forward",
]
