"""A synchronous PPO on Stampede's Atari envs and network: the reference of docs/learning.md.

Not part of Stampede's training path. It answers one question: does the same environment vector
(``stampede.envs.make_vec_env``) and the same network (``stampede.models.AtariNet``) learn Pong
when trained by a plain, single-process, on-policy algorithm with a known track record? It
follows CleanRL's PPO Atari recipe (Schulman et al. 2017; Huang et al. 2022, "The 37
implementation details of PPO"): 8 envs x 128 steps, GAE lambda 0.95, 4 epochs of 4 shuffled
minibatches, ratio clip 0.1, value clip 0.1, advantages normalised per minibatch, entropy 0.01,
value 0.5, Adam 2.5e-4 annealed to 0, gradient-norm clip 0.5 on mean losses. If it learns and
Stampede does not, the difference is in Stampede's algorithm or settings, not in the env or net.

    python benchmarks/ppo_reference.py --frames 3000000 --out runs/ppo_reference/episodes.jsonl

writes one line per finished game (the format of a run's ``episodes.jsonl``, so
``benchmarks/learning.py --report-only --run-dir runs/ppo_reference`` reports it) and prints the
mean return of the last 100 games as it goes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from stampede.envs import make_vec_env
from stampede.models import AtariNet

ENVS, STEPS, EPOCHS, MINIBATCHES = 8, 128, 4, 4
LR, CLIP, GAMMA, GAE_LAMBDA = 2.5e-4, 0.1, 0.99, 0.95


def gae(rewards: Tensor, values: Tensor, dones: Tensor, next_value: Tensor) -> Tensor:
    """Advantages [N, E] by generalised advantage estimation; dones[t] ends step t's episode."""
    advantages = torch.zeros_like(values)
    last = torch.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        v_tp1 = next_value if t == len(rewards) - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + GAMMA * v_tp1 * not_done - values[t]
        last = delta + GAMMA * GAE_LAMBDA * not_done * last
        advantages[t] = last
    return advantages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=3_000_000)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs/ppo_reference/episodes.jsonl"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    env = make_vec_env(num_envs=ENVS, seed=args.seed, kind="atari", game=args.game)
    model = AtariNet(env.spec.obs_shape, env.spec.num_actions)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, eps=1e-5)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log = args.out.open("w")

    obs = torch.from_numpy(env.reset(seed=args.seed))
    last_action = torch.zeros(ENVS, dtype=torch.long)
    reward = torch.zeros(ENVS)
    done = torch.ones(ENVS, dtype=torch.bool)
    frames, returns, started = 0, [], time.time()
    iterations = args.frames // (ENVS * STEPS * env.spec.frames_per_step)
    for iteration in range(iterations):
        optimizer.param_groups[0]["lr"] = LR * (1 - iteration / iterations)
        inputs, actions, log_probs, values, rewards, dones = [], [], [], [], [], []
        for _ in range(STEPS):  # [E] per step; stacked to [N, E] below
            x = (obs, last_action, reward.clamp(-1, 1), done)
            with torch.no_grad():
                out = model(*(t[None] for t in x))  # a time axis of one
            dist = torch.distributions.Categorical(logits=out.policy_logits[0])
            action = dist.sample()
            inputs.append(x)
            actions.append(action)
            log_probs.append(dist.log_prob(action))
            values.append(out.baseline[0])
            step = env.step(action.numpy())
            obs, reward = torch.from_numpy(step.obs), torch.from_numpy(step.reward)
            done, last_action = torch.from_numpy(step.done), action
            rewards.append(reward.clamp(-1, 1))
            dones.append(done.float())
            frames += ENVS * env.spec.frames_per_step
            for ret in step.episode_return[np.isfinite(step.episode_return)]:
                returns.append(float(ret))
                row = {"env/frames": frames, "time/elapsed_s": time.time() - started}
                log.write(json.dumps(row | {"env/episode_return": float(ret)}) + "\n")
        log.flush()
        with torch.no_grad():
            x = (obs, last_action, reward.clamp(-1, 1), done)
            next_value = model(*(t[None] for t in x)).baseline[0]
        v = torch.stack(values)  # [N, E]
        adv = gae(torch.stack(rewards), v, torch.stack(dones), next_value)
        # [N, E, ...] -> [N * E, ...]: every sample stands alone (no LSTM)
        flat = [torch.stack(field).flatten(0, 1) for field in zip(*inputs, strict=True)]
        a, old_lp = torch.stack(actions).flatten(), torch.stack(log_probs).flatten()
        old_v, adv = v.flatten(), adv.flatten()
        ret_target = adv + old_v
        for _ in range(EPOCHS):
            for index in torch.randperm(len(a)).chunk(MINIBATCHES):
                out = model(*(t[index][None] for t in flat))  # [1, M, ...]
                dist = torch.distributions.Categorical(logits=out.policy_logits[0])
                ratio = (dist.log_prob(a[index]) - old_lp[index]).exp()
                mb_adv = adv[index]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg = -torch.min(ratio * mb_adv, ratio.clamp(1 - CLIP, 1 + CLIP) * mb_adv).mean()
                value = out.baseline[0]
                clipped = old_v[index] + (value - old_v[index]).clamp(-CLIP, CLIP)
                v_loss = torch.max(
                    (value - ret_target[index]) ** 2, (clipped - ret_target[index]) ** 2
                ).mean()
                loss = pg + 0.25 * v_loss - 0.01 * dist.entropy().mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                optimizer.step()
        if iteration % 10 == 0 and returns:
            fps = frames / (time.time() - started)
            print(
                f"{frames:>10,} frames  mean of last 100: {np.mean(returns[-100:]):6.2f}  "
                f"{len(returns)} games  {fps:,.0f} fps",
                flush=True,
            )


if __name__ == "__main__":
    main()
