"""The balancer's rules on a fake clock, the judging of answers, and the settings' checks."""

import random

import pytest
from captcha_gateway_client import (
    Balancer,
    ConfigError,
    EjectionPolicy,
    GatewayClient,
    Outcome,
    Strategy,
    _judge,
)
from captcha_gateway_client.errors import FleetLimitedError, RefusedError


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def balancer(strategy=Strategy.LEAST_OUTSTANDING, addresses=("a", "b", "c")):
    clock = Clock()
    return Balancer(list(addresses), strategy, EjectionPolicy(), seed=7, clock=clock), clock


def states(b):
    return b.states()


def fail(b, address, times, outcome=Outcome.CONNECT_FAILED):
    for _ in range(times):
        b.record(address, outcome, b.now())


@pytest.mark.parametrize("strategy", list(Strategy))
def test_three_failures_eject_for_the_base_then_it_is_let_back_and_doubles_on_failure(strategy):
    b, clock = balancer(strategy)
    fail(b, "a", 2)
    assert not states(b)["a"].ejected
    fail(b, "a", 1)
    assert states(b)["a"].ejected and states(b)["a"].ejections == 1
    for _ in range(50):
        t = b.pick()
        assert t.address != "a"
        b.finish(t, Outcome.SUCCESS)
    clock.t += 10.0
    assert not states(b)["a"].ejected
    # Half-open: one failure ejects again, for twice as long.
    fail(b, "a", 1)
    assert states(b)["a"].ejected
    clock.t += 19.9
    assert states(b)["a"].ejected
    clock.t += 0.1
    assert not states(b)["a"].ejected
    b.record("a", Outcome.SUCCESS, b.now())
    assert states(b)["a"].readmissions == 1


def test_a_429_neither_counts_nor_clears_and_outcomes_sent_during_an_ejection_are_ignored():
    b, clock = balancer()
    fail(b, "a", 2)
    fail(b, "a", 5, Outcome.FLEET_LIMITED)
    fail(b, "a", 1)
    assert states(b)["a"].ejected
    sent = b.now()
    clock.t += 1.0
    b.record("a", Outcome.SERVER_ERROR, sent)
    clock.t += 9.0
    assert not states(b)["a"].ejected, "the ejection was not stretched"
    b.record("a", Outcome.SUCCESS, sent)
    assert states(b)["a"].readmissions == 0, "a success sent before the end proves nothing"


def test_every_gateway_ejected_still_answers_with_the_one_back_soonest():
    b, clock = balancer()
    fail(b, "b", 3)
    clock.t += 1.0
    fail(b, "a", 3)
    fail(b, "c", 3)
    t = b.pick()
    assert t.address == "b"
    b.abandon(t)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_random_sequences_keep_counts_exact_and_never_pick_an_ejected_one_while_another_is_up(
    strategy,
):
    rng = random.Random(3)
    b, clock = balancer(strategy, ("a", "b", "c", "d"))
    held = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.45:
            now_states = states(b)
            t = b.pick(avoid=[rng.choice("abcd")] if rng.random() < 0.2 else ())
            up = [s for s in now_states.values() if not s.ejected]
            if up:
                assert not now_states[t.address].ejected
            held.append(t)
        elif op < 0.85 and held:
            t = held.pop(rng.randrange(len(held)))
            b.finish(t, rng.choice(list(Outcome)))
        elif op < 0.9 and held:
            b.abandon(held.pop(rng.randrange(len(held))))
        else:
            clock.t += rng.uniform(0, 15)
        out = {a: 0 for a in "abcd"}
        for t in held:
            out[t.address] += 1
        assert {a: s.outstanding for a, s in states(b).items()} == out
    for t in held:
        b.finish(t, Outcome.SUCCESS)
        b.finish(t, Outcome.SUCCESS)  # a second finish is ignored
    assert all(s.outstanding == 0 for s in states(b).values())


def test_least_outstanding_avoids_the_tried_gateway_and_prefers_the_asked_one():
    b, _ = balancer()
    t = b.pick(avoid=["a", "b"])
    assert t.address == "c"
    t2 = b.pick(prefer="c")
    assert t2.address == "c"


def test_answers_are_judged_like_the_rust_client():
    refused = _judge.answer("gw", 503, "1", b'{"error": "WORKER_AT_CAPACITY"}', False)
    assert refused[0] is Outcome.SHED and isinstance(refused[1], _judge.Retry)
    assert isinstance(refused[1].error, RefusedError) and refused[1].error.retry_after == 1.0
    limited = _judge.answer(
        "gw", 429, "30", b'{"error": {"code": "tenant_max_solves_per_hour"}}', True
    )
    assert limited[0] is Outcome.FLEET_LIMITED and isinstance(limited[1], FleetLimitedError)
    shutting = b'{"error": {"code": "shutting_down", "message": "m"}}'
    assert not isinstance(_judge.answer("gw", 503, "1", shutting, False)[1], _judge.Retry)
    assert isinstance(_judge.answer("gw", 503, "1", shutting, True)[1], _judge.Retry)
    verdict = _judge.answer("gw", 502, None, b'{"error": {"code": "ERROR_PROXY"}}', True)
    assert verdict[0] is Outcome.SUCCESS
    assert _judge.answer("gw", 200, None, b'{"token": "t"}', False) == (
        Outcome.SUCCESS,
        {"token": "t"},
    )
    assert _judge.probe(200, b'{"load_pct": 95.0}') == (Outcome.SHED, 95.0)
    assert _judge.probe(200, b'{"load_pct": 10}') == (Outcome.SUCCESS, 10.0)
    assert _judge.probe(None, b"")[0] is Outcome.CONNECT_FAILED


@pytest.mark.parametrize(
    "kwargs, setting",
    [
        (dict(backends=[]), "backends"),
        (dict(backends=["http://a:1", "http://a:1/"]), "backends"),
        (dict(backends=["a:1"]), "backends"),
        (dict(max_attempts=0), "max_attempts"),
        (dict(max_attempts=11), "max_attempts"),
        (dict(probe_interval=0), "probe_interval"),
        (dict(retry_cap=float("nan")), "retry_cap"),
        (dict(ejection=EjectionPolicy(3, 10.0, 1.0)), "max_ejection"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, setting):
    kwargs = {"backends": ["http://127.0.0.1:1"], "probe_interval": None, **kwargs}
    with pytest.raises(ConfigError) as e:
        GatewayClient(kwargs.pop("backends"), **kwargs)
    assert str(e.value).startswith(setting + ":")


def test_credentials_in_urls_are_refused_without_being_echoed_and_the_key_is_never_shown():
    with pytest.raises(ConfigError) as e:
        GatewayClient(["http://user:hunter2@gw.example:8080"], probe_interval=None)
    assert "hunter2" not in str(e.value)
    client = GatewayClient(["http://127.0.0.1:1"], key="s3cret-key", probe_interval=None)
    assert "s3cret-key" not in repr(client)
    client.close()


def test_a_bad_task_id_cannot_change_the_path():
    client = GatewayClient(["http://127.0.0.1:1"], probe_interval=None)
    for bad in ["..", "../x", "a/b", "", "x" * 65]:
        with pytest.raises(ConfigError):
            client.task(bad)
    client.close()
