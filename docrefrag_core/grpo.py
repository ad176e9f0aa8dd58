"""Group relative policy optimisation (GRPO) of the chunk selector, as tensor functions.

For one question the policy (the selector) draws G selections of T chunks; each is read by the
frozen reader and rewarded with the gold answer's mean token log-probability given the mixed
sequence (teacher-forced, one forward pass: `DocRefragReader.answer_reward`; REFRAG rewards its
policy with negative perplexity), optionally plus a weight times the benchmark's own scorer of the
decoded answer (`train.Trainer.rollout_reward`). Each of a selection's T draws is an action, as each
token is in GRPO for LLMs (DeepSeekMath): with l_gt = log pi(s_gt | s_g<t) the draw's log-probability,

    A_g    = (r_g - mean(r)) / (std(r) + eps)                 group-relative advantage
    rho_gt = exp(l_gt - l_old_gt)                             per-draw ratio to the sampling policy
    L      = -mean_gt min(rho_gt A_g, clip(rho_gt, 1-eps, 1+eps) A_g) + beta * mean_gt KL_gt(pi || pi_ref)

with KL_gt the unbiased k3 estimator exp(l_ref - l) - (l_ref - l) - 1 per draw. At pi = pi_old the
gradient is REINFORCE's with the selection's log-probability divided by T. The ratio of a whole
selection (the sum over its T = 10-65 draws) made the k3 term explode once the policy moved
(docs/decisions/selector.md).

Departures from the Doc-REFRAG paper, forced by training on 2 CPU cores: the reference policy is the
warm-started selector at the start of stage 3; groups are sequences of one to a few pages; a group's
rollouts (the decoder's forward passes, the cost) may serve several selector updates (`updates`, the
DeepSeekMath mu), the clip bounding each draw's ratio to the policy that sampled it.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(G,) rewards -> (G,) advantages: reward minus the group mean over the group's std (0 if all equal)."""
    centred = rewards - rewards.mean()
    std = rewards.std(unbiased=False)
    return centred / (std + eps) if float(std) > 0 else torch.zeros_like(rewards)


def kl_k3(log_p: torch.Tensor, log_ref: torch.Tensor) -> torch.Tensor:
    """Per-sample unbiased estimate of KL(pi || pi_ref) from log-probabilities of samples of pi."""
    diff = log_ref - log_p
    return torch.exp(diff) - diff - 1.0


def grpo_loss(log_p: torch.Tensor, log_old: torch.Tensor, log_ref: torch.Tensor, advantages: torch.Tensor,
              clip_eps: float = 0.2, beta: float = 0.1) -> torch.Tensor:
    """The clipped per-draw surrogate with a per-draw KL penalty, averaged over draws and the group.
    log_p, log_old, log_ref (G, T): each draw's log-probability; advantages (G,)."""
    assert log_p.ndim == 2 and log_p.shape == log_old.shape == log_ref.shape and advantages.shape == log_p.shape[:1]
    ratio = torch.exp(log_p - log_old.detach())  # (G, T)
    adv = advantages[:, None]  # (G, 1): a selection's draws share its advantage
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)  # (G, T)
    return (-surrogate + beta * kl_k3(log_p, log_ref.detach())).mean()
