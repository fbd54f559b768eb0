"""The request table of central inference (stampede.train.requests): the rows of each actor's
env groups, and the protocol of a request and its answer, stale answers skipped."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from stampede.models import MLP
from stampede.train.inference import _Server
from stampede.train.requests import env_groups

from .conftest import OBS, SETUP, A, inputs, serving, table


def test_env_groups_split_evenly_and_refuse_too_many() -> None:
    assert env_groups(8, 2) == [(0, 4), (4, 8)]
    assert env_groups(5, 2) == [(0, 2), (2, 5)] or env_groups(5, 2) == [(0, 3), (3, 5)]
    assert env_groups(3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="cannot split 2 envs into 3 groups"):
        env_groups(2, 3)


def test_a_replacement_actor_skips_the_answer_meant_for_the_one_that_died() -> None:
    """An actor killed after posting leaves its request pending; the server answers it, and the
    replacement (a new client on the same rows) gets the answer to its own request, not that
    stale one. The other actor is served throughout."""
    model = MLP((OBS,), A)
    t = table(model, actors=2, envs=2, groups=1)
    dead, other = t.client(0), t.client(1)
    task = torch.zeros(2, dtype=torch.long)
    dead.request(0, inputs(2, seed=1), task, ())  # and then it is killed
    server = _Server(SETUP, model, t)
    with serving(server):
        other.request(0, inputs(2, seed=2), task, ())
        assert other.result(0) is not None
        time.sleep(0.05)  # the dead actor's request has been answered by now, unread
        replacement = t.client(0)
        mine = inputs(2, seed=3)
        replacement.request(0, mine, task, ())
        _, logits, _ = replacement.result(0)
    with torch.no_grad():
        expected = model(
            mine[0][None], mine[1][None], mine[2].clamp(-1, 1)[None], mine[3][None], ()
        )
    torch.testing.assert_close(logits, expected.policy_logits[0])


def test_each_request_has_its_actors_rows_of_its_group() -> None:
    """Row actor * E + e holds env e of that actor; request actor * G + g its group g."""
    t = table(MLP((OBS,), A), actors=2, envs=5, groups=2)
    assert t.groups == [(0, 2), (2, 5)]
    assert [t.rows(r) for r in range(4)] == [slice(0, 2), slice(2, 5), slice(5, 7), slice(7, 10)]
    assert t.obs.shape == (10, OBS)
    assert t.logits.shape == (10, A)
    assert t.requested.shape == t.answered.shape == (4,)
    assert len(t.reply) == 4


def test_a_request_writes_its_rows_only_and_wakes_the_server() -> None:
    model = MLP((OBS,), A, use_lstm=True, hidden_size=8)
    t = table(model, actors=2, envs=4, groups=2)
    client = t.client(1)
    obs, last_action, reward, done = inputs(2, seed=0)
    task = torch.tensor([3, 4])
    state = tuple(torch.full_like(s, 7.0) for s in model.initial_state(2))
    client.request(1, (obs, last_action, reward, done), task, state)
    rows = t.rows(3)  # actor 1, group 1: rows 6 and 7
    assert rows == slice(6, 8)
    torch.testing.assert_close(t.obs[rows], obs)
    assert torch.equal(t.last_action[rows], last_action)
    torch.testing.assert_close(t.reward[rows], reward)
    assert torch.equal(t.done[rows], done)
    assert torch.equal(t.task[rows], task)
    for shared in t.core_in:  # [layers, rows, H]
        assert (shared[:, rows] == 7.0).all()
        assert (shared[:, :6] == 0.0).all()
    assert (t.obs[:6] == 0).all()  # no other row written
    assert t.requested.tolist() == [0, 0, 0, 1]
    assert t.ready.acquire(timeout=1)  # one post for the server
    assert not t.ready.acquire(timeout=0.01)
    client.request(1, (obs, last_action, reward, done), task, state)
    assert t.requested.tolist() == [0, 0, 0, 2]  # the request's number


def answer(t, request: int, action: list[int], logits: float) -> None:
    """What the server does for one request: the outputs into its rows, then the answer."""
    rows = t.rows(request)
    t.action[rows] = torch.tensor(action)
    t.logits[rows] = logits
    for shared in t.core_out:
        shared[:, rows] = logits
    t.answered[request] = t.requested[request]
    t.reply[request].release()


def test_the_result_is_a_copy_of_the_answer_to_this_request() -> None:
    model = MLP((OBS,), A, use_lstm=True, hidden_size=8)
    t = table(model, actors=1, envs=4, groups=2)
    client = t.client(0)
    client.request(0, inputs(2, seed=1), torch.zeros(2, dtype=torch.long), model.initial_state(2))
    answer(t, 0, [2, 1], logits=0.5)
    action, logits, core = client.result(0)
    answer(t, 0, [0, 0], logits=-1.0)  # the table is reused by the next request
    assert action.tolist() == [2, 1]
    assert (logits == 0.5).all()
    assert logits.shape == (2, A)
    assert len(core) == len(t.core_out)
    assert all(s.shape == (1, 2, 8) and (s == 0.5).all() for s in core)


def test_a_stale_answer_is_skipped_until_the_own_one_comes() -> None:
    """The answer to an earlier request (of an actor killed before it read it) wakes the client
    but is not taken for the answer to its own request."""
    t = table(MLP((OBS,), A), actors=1, envs=2, groups=1)
    client = t.client(0)
    task = torch.zeros(2, dtype=torch.long)
    client.request(0, inputs(2, seed=1), task, ())
    client.request(0, inputs(2, seed=2), task, ())  # request 2: request 1's answer is stale
    t.action[:] = torch.tensor([2, 2])
    t.answered[0] = 1
    t.reply[0].release()
    got = []
    waiting = threading.Thread(target=lambda: got.append(client.result(0)), daemon=True)
    waiting.start()
    waiting.join(timeout=0.3)
    assert waiting.is_alive()  # still waiting: the post was not for its request
    answer(t, 0, [1, 0], logits=0.0)
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    ((action, _, _),) = got
    assert action.tolist() == [1, 0]


def test_the_result_is_none_once_the_learner_is_gone() -> None:
    """An actor whose learner process died (even by kill -9) stops waiting and ends."""
    t = table(MLP((OBS,), A), actors=1, envs=2, groups=1)
    client = t.client(0)
    client.request(0, inputs(2, seed=1), torch.zeros(2, dtype=torch.long), ())
    client.parent = -1  # the process that started it is not this one's parent any more
    assert client.result(0) is None
