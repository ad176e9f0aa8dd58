"""Group relative policy optimisation (GRPO) of the chunk selector, as tensor functions.

For one question the policy (the selector) draws G selections of T chunks; each is read by the
frozen reader and rewarded with the gold answer's mean token log-probability given the mixed
sequence (teacher-forced, one forward pass: `DocRefragReader.answer_reward`; REFRAG rewards its
policy with negative perplexity), optionally plus a weight times the benchmark's own scorer of the
decoded answer (`train.Trainer.rollout_reward`). Then

    A_g   = (r_g - mean(r)) / (std(r) + eps)                         group-relative advantage
    rho_g = exp(log pi(s_g) - log pi_old(s_g))                       ratio to the sampling policy
    L     = -mean_g min(rho_g A_g, clip(rho_g, 1-eps, 1+eps) A_g) + beta * KL(pi || pi_ref)

with the KL estimated per sample by the unbiased k3 estimator
exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1 (as in DeepSeekMath).

Departures from the Doc-REFRAG paper, forced by training on 2 CPU cores: log pi(s) is the Plackett-Luce
log-probability of the ordered draw (Gumbel top-k), the ratio taken per selection, not per chunk; one
policy update per group (clipping matters only when `updates_per_group` > 1); the reference policy is
the warm-started selector at the start of stage 3; groups are sequences of one to a few pages. Measured
(docs/decisions/selector.md): with T = 20-65 draws the summed log-ratio makes the k3 KL explode once the
policy moves; a per-draw mean is the next thing to try.
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
    """The clipped surrogate with a KL penalty, averaged over the group. All inputs (G,)."""
    ratio = torch.exp(log_p - log_old.detach())
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    return (-surrogate + beta * kl_k3(log_p, log_ref.detach())).mean()
