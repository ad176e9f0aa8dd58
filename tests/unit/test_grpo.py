"""GRPO's pieces on hand-made tensors: advantages, per-draw clipping and KL, and the gradient at the
sampling policy (REINFORCE with the selection's log-probability over its length)."""

from __future__ import annotations

import math

import pytest
import torch

from docrefrag.core.grpo import group_advantages, grpo_loss, kl_k3
from docrefrag.core.selector import draw_log_probs, sample_selection


def test_advantages_are_reward_minus_group_mean_over_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages(torch.tensor([0.5, 0.5, 0.5])).tolist() == [0.0, 0.0, 0.0]  # no signal, no update


def test_each_draw_is_clipped_on_the_side_its_advantage_would_exploit():
    log_old = torch.zeros(2, 2)
    log_ref = torch.zeros(2, 2)
    # draw 0: ratio e^1 = 2.72; draw 1: ratio 1
    log_p = torch.tensor([[1.0, 0.0], [1.0, 0.0]], requires_grad=True)
    loss = grpo_loss(log_p, log_old, log_ref, torch.tensor([1.0, -1.0]), clip_eps=0.2, beta=0.0)
    loss.backward()
    # selection 0 (A = 1): draw 0 min(2.72, 1.2) = 1.2 (clipped, no grad), draw 1: 1
    # selection 1 (A = -1): draw 0 min(-2.72, -1.2) = -2.72 (unclipped), draw 1: -1
    assert float(loss) == pytest.approx((-1.2 - 1 + math.e + 1) / 4, rel=1e-5)
    assert log_p.grad[0, 0] == 0 and log_p.grad[0, 1] == pytest.approx(-1 / 4)
    assert log_p.grad[1, 0] == pytest.approx(math.e / 4, rel=1e-5) and log_p.grad[1, 1] == pytest.approx(1 / 4)


def test_kl_k3_is_zero_at_the_reference_and_positive_elsewhere():
    assert float(kl_k3(torch.tensor(-2.0), torch.tensor(-2.0))) == 0.0
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))) == pytest.approx(math.exp(-1) + 1 - 1, rel=1e-6)
    # its expectation under p is KL(p || ref) for a two-outcome distribution
    p, ref = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    expected = float((p * kl_k3(p.log(), ref.log())).sum())
    assert expected == pytest.approx(float((p * (p / ref).log()).sum()), rel=1e-6)


def test_the_kl_term_pulls_the_policy_back_to_the_reference():
    log_p = torch.tensor([[-0.5]], requires_grad=True)
    grpo_loss(log_p, log_p.detach(), torch.tensor([[-2.0]]), torch.zeros(1), beta=0.1).backward()
    assert log_p.grad[0, 0] > 0  # descending lowers log_p toward log_ref


@pytest.mark.parametrize("T", [1, 60])
def test_the_kl_penalty_of_a_selection_does_not_grow_with_its_length(T):
    """Each draw 1.5 nats from the reference: the penalty is one draw's k3, whatever T (summed over
    the draws, the log-ratio of 60 draws is 90 nats and exp() of it overflows)."""
    log_p = torch.full((2, T), -1.0)
    loss = grpo_loss(log_p, log_p, log_p - 1.5, torch.zeros(2), beta=1.0)
    assert float(loss) == pytest.approx(math.exp(-1.5) + 1.5 - 1, rel=1e-6)


def test_at_the_sampling_policy_the_gradient_is_reinforce_over_the_selection_length():
    torch.manual_seed(0)
    logits = torch.randn(30, requires_grad=True)
    generator = torch.Generator().manual_seed(1)
    selections = [sample_selection(logits, 8, generator) for _ in range(4)]
    advantages = group_advantages(torch.tensor([0.3, -1.0, 2.0, 0.5]))
    log_p = torch.stack([draw_log_probs(logits, s) for s in selections])  # (G, T)
    (grad,) = torch.autograd.grad(grpo_loss(log_p, log_p.detach(), log_p.detach(), advantages), logits,
                                  retain_graph=True)
    reinforce = -(advantages * log_p.sum(dim=1) / 8).mean()  # the selection's log-probability over T
    (expected,) = torch.autograd.grad(reinforce, logits)
    assert grad.abs().sum() > 0 and torch.allclose(grad, expected, atol=1e-6)
