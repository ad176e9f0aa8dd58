"""GRPO's pieces on hand-made tensors: advantages, clipping, the KL estimator."""

from __future__ import annotations

import math

import pytest
import torch

from docrefrag.core.grpo import group_advantages, grpo_loss, kl_k3


def test_advantages_are_reward_minus_group_mean_over_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages(torch.tensor([0.5, 0.5, 0.5])).tolist() == [0.0, 0.0, 0.0]  # no signal, no update


def test_the_ratio_is_clipped_on_the_side_the_advantage_would_exploit():
    log_old = torch.zeros(2)
    log_ref = torch.zeros(2)
    # ratio e^1 = 2.72 with a positive advantage: clipped to 1.2, so no gradient flows
    log_p = torch.tensor([1.0, 1.0], requires_grad=True)
    loss = grpo_loss(log_p, log_old, log_ref, torch.tensor([1.0, -1.0]), clip_eps=0.2, beta=0.0)
    loss.backward()
    # sample 0: min(2.72*1, 1.2*1) = 1.2 (clipped, no grad); sample 1: min(-2.72, -1.2) = -2.72 (unclipped)
    assert float(loss) == pytest.approx((-1.2 + math.e) / 2, rel=1e-5)
    assert log_p.grad[0] == 0 and log_p.grad[1] == pytest.approx(math.e / 2, rel=1e-5)


def test_kl_k3_is_zero_at_the_reference_and_positive_elsewhere():
    assert float(kl_k3(torch.tensor(-2.0), torch.tensor(-2.0))) == 0.0
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))) == pytest.approx(math.exp(-1) + 1 - 1, rel=1e-6)
    # its expectation under p is KL(p || ref) for a two-outcome distribution
    p, ref = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    expected = float((p * kl_k3(p.log(), ref.log())).sum())
    assert expected == pytest.approx(float((p * (p / ref).log()).sum()), rel=1e-6)


def test_the_kl_term_pulls_the_policy_back_to_the_reference():
    log_p = torch.tensor([-0.5], requires_grad=True)
    grpo_loss(log_p, log_p.detach(), torch.tensor([-2.0]), torch.zeros(1), beta=0.1).backward()
    assert log_p.grad[0] > 0  # descending lowers log_p toward log_ref
