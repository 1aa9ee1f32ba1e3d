"""The token exchange's decisions with a fake clock, and its HTTP side on 127.0.0.1.

Grafana's clients keep an exchanged token until 15 s before its ``exp``, run one
exchange at a time and retry 429, 5xx and no answer three times (250 ms doubling
to 1 s). Secrets never show in reprs or error messages.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from xds_client.errors import UsageError
from xds_client.store import (
    AsyncResourceStoreClient,
    ExchangeBackoff,
    ExchangedToken,
    ForbiddenError,
    HttpTokenExchanger,
    QuotaExceededError,
    ResourceKey,
    ResourceStoreClient,
    TokenExchange,
    TokenExchangeError,
    UnauthorizedError,
)
from xds_client.store._auth import (
    TokenCache,
    call_metadata,
    id_token_of,
    jwt_expiry,
    parse_exchange_response,
)
from xds_client.store._errors import error_class, from_rpc_error
from xds_client.testing import AccessTokenCheck, ResourceStoreServer, mint_access_token

from ._token_exchange import TokenExchangeServer

pytestmark = pytest.mark.timeout(30)

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def jwt(claims: dict[str, object]) -> str:
    def b64(doc: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}.sig"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """A fetch that answers from a list: a token, or a TokenExchangeError to raise."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> ExchangedToken:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, ExchangedToken)
        return answer


# ---------------------------------------------------------------- sans-I/O decisions


def test_cache_keeps_a_token_until_15s_before_it_expires() -> None:
    cache = TokenCache()
    assert cache.get(0) is None
    cache.put(ExchangedToken("t", expires_at=100))
    assert cache.get(84.9) == "t"
    assert cache.get(85.0) is None  # 15 s before expiry it is exchanged again
    cache.put(ExchangedToken("u", expires_at=0))  # no expiry known: not kept
    assert cache.get(0) is None


def test_jwt_expiry_reads_exp_without_checking_the_signature() -> None:
    assert jwt_expiry(jwt({"exp": 1234})) == 1234
    assert jwt_expiry(jwt({"namespace": "x"})) == 0
    assert jwt_expiry(jwt({"exp": True})) == 0
    assert jwt_expiry("not-a-jwt") == 0
    assert jwt_expiry("a.%%%.c") == 0


def test_exchange_answers_are_parsed_into_tokens_or_typed_errors() -> None:
    token = jwt({"exp": 99})
    body = json.dumps({"status": "success", "data": {"token": token}}).encode()
    assert parse_exchange_response(200, body, url="u") == ExchangedToken(token, 99)
    with pytest.raises(TokenExchangeError, match=r"without data\.token") as empty:
        parse_exchange_response(200, b"{}", url="u")
    assert not empty.value.retryable
    with pytest.raises(TokenExchangeError, match="answered 401: bad token") as refused:
        parse_exchange_response(401, b'{"error": "bad token"}', url="u")
    assert (refused.value.status, refused.value.retryable) == (401, False)
    assert isinstance(refused.value, UnauthorizedError)
    for status in (429, 500, 503):
        with pytest.raises(TokenExchangeError) as busy:
            parse_exchange_response(status, b"<html>", url="u")
        assert busy.value.retryable


def test_backoff_is_250ms_doubling_to_1s_three_retries() -> None:
    backoff = ExchangeBackoff()
    busy = TokenExchangeError("busy", status=503)
    assert [backoff.delay(n, busy) for n in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, None]
    assert backoff.delay(1, TokenExchangeError("no", status=403)) is None


def test_credential_caches_and_exchanges_again_near_expiry() -> None:
    clock = Clock()
    fetch = Script(ExchangedToken("a", clock.now + 60), ExchangedToken("b", clock.now + 200))
    cred = TokenExchange(fetch, clock=clock, sleep=clock.sleep)
    assert cred.cached() is None
    assert cred.token() == "a"
    assert cred.token() == "a"
    clock.now += 44.9
    assert cred.cached() == "a"
    clock.now += 0.2  # now 15 s before expiry
    assert cred.cached() is None
    assert cred.token() == "b"
    assert (fetch.calls, cred.exchanges) == (2, 2)
    cred.invalidate()
    assert cred.cached() is None


def test_credential_retries_429_and_5xx_then_succeeds() -> None:
    clock = Clock()
    fetch = Script(
        TokenExchangeError("busy", status=429),
        TokenExchangeError("down", status=503),
        TokenExchangeError("no answer"),
        ExchangedToken("t", clock.now + 600),
    )
    cred = TokenExchange(fetch, clock=clock, sleep=clock.sleep)
    assert cred.token() == "t"
    assert clock.slept == [0.25, 0.5, 1.0]


def test_credential_gives_up_after_three_retries_and_at_once_on_refusal() -> None:
    clock = Clock()
    cred = TokenExchange(
        Script(*[TokenExchangeError("busy", status=503)] * 4), clock=clock, sleep=clock.sleep
    )
    with pytest.raises(TokenExchangeError, match="busy"):
        cred.token()
    assert cred.exchanges == 4
    refused = TokenExchange(Script(TokenExchangeError("no", status=403)), sleep=clock.sleep)
    with pytest.raises(TokenExchangeError):
        refused.token()
    assert refused.exchanges == 1


def test_fetch_may_return_a_pair_or_a_jwt_but_nothing_else() -> None:
    assert TokenExchange(lambda: ("p", time.time() + 60)).token() == "p"
    token = jwt({"exp": int(time.time()) + 60})
    cred = TokenExchange(lambda: token)
    assert cred.token() == token
    assert cred.cached() == token
    with pytest.raises(UsageError, match="must return"):
        TokenExchange(lambda: 42).token()  # type: ignore[arg-type,return-value]


def test_one_exchange_in_flight_for_many_threads() -> None:
    calls = []

    def slow() -> ExchangedToken:
        calls.append(1)
        time.sleep(0.2)
        return ExchangedToken("t", time.time() + 600)

    cred = TokenExchange(slow)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(cred.token())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results == ["t"] * 8
    assert len(calls) == 1


def test_metadata_and_id_tokens() -> None:
    static = (("a", "1"),)
    assert call_metadata(static, None, None) is static
    assert call_metadata(static, "tok", "id") == (
        ("a", "1"),
        ("x-access-token", "tok"),
        ("x-id-token", "id"),
    )
    assert id_token_of(None) is None
    assert id_token_of("") is None
    assert id_token_of(lambda: "u") == "u"
    assert id_token_of(lambda: None) is None


def test_secrets_stay_out_of_reprs() -> None:
    assert "s3cret" not in repr(ExchangedToken("s3cret", 5))
    exchanger = HttpTokenExchanger("http://127.0.0.1:1/x", "s3cret", namespace="stacks-1")
    assert "s3cret" not in repr(exchanger)
    assert "[redacted]" in repr(exchanger)
    cred = TokenExchange(exchanger)
    assert "s3cret" not in repr(cred)


def test_http_request_shape_is_grafanas() -> None:
    exchanger = HttpTokenExchanger(
        "https://auth.example/v1/sign-access-token", "svc", namespace="stacks-7"
    )
    req = exchanger.request()
    assert req.get_method() == "POST"
    assert req.get_header("Authorization") == "Bearer svc"
    assert req.get_header("Content-type") == "application/json"
    assert isinstance(req.data, bytes)
    assert json.loads(req.data) == {"namespace": "stacks-7", "audiences": ["resourceStore"]}


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"url": "ftp://x", "token": "t", "namespace": "n"}, "http"),
        ({"url": "http://x", "token": "", "namespace": "n"}, "service's token"),
        ({"url": "http://x", "token": "t", "namespace": ""}, "namespace"),
        ({"url": "http://x", "token": "t", "namespace": "n", "audiences": ()}, "audience"),
    ],
)
def test_bad_exchange_settings_are_usage_errors(kwargs: dict[str, object], what: str) -> None:
    with pytest.raises(UsageError, match=what):
        HttpTokenExchanger(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- quota errors


def test_a_403_that_names_the_quota_is_a_quota_error() -> None:
    message = "Quota exceeded: dashboards has 2 of its 2 objects"
    assert error_class(403, "", message) is QuotaExceededError
    assert error_class(403, "QuotaExceeded", "") is QuotaExceededError
    assert error_class(0, "QuotaExceeded", "") is QuotaExceededError
    assert error_class(403, "", "not allowed to create") is ForbiddenError
    assert issubclass(QuotaExceededError, ForbiddenError)

    class Denied(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.PERMISSION_DENIED

        def details(self) -> str:
            return "resource quota exceeded"

    error = from_rpc_error(Denied(), None)
    assert isinstance(error, QuotaExceededError)
    assert error.code == 403


# ---------------------------------------------------------------- over HTTP


@pytest.fixture
def exchange() -> Iterator[TokenExchangeServer]:
    with TokenExchangeServer(b"k") as tx:
        yield tx


def test_http_exchange_against_a_loopback_server(exchange: TokenExchangeServer) -> None:
    clock = Clock(time.time())
    cred = TokenExchange.http(
        exchange.url,
        "service-token",
        namespace="stacks-1",
        opener=NO_PROXY,
        clock=clock,
        sleep=clock.sleep,
    )
    exchange.fail_with.extend([429, 503])
    token = cred.token()
    assert jwt_expiry(token) > clock.now + 500
    assert cred.token() == token
    assert exchange.exchanges == 3  # two refusals, retried, then the token
    assert clock.slept == [0.25, 0.5]
    headers, body = exchange.requests[-1]
    assert headers["Authorization"] == "Bearer service-token"
    assert body == {"namespace": "stacks-1", "audiences": ["resourceStore"]}


def test_http_exchange_refused_is_not_retried_and_hides_the_token(
    exchange: TokenExchangeServer,
) -> None:
    cred = TokenExchange.http(exchange.url, "wrong-secret", namespace="ns", opener=NO_PROXY)
    with pytest.raises(TokenExchangeError) as refused:
        cred.token()
    assert refused.value.status == 401
    assert "wrong-secret" not in str(refused.value)
    assert exchange.exchanges == 1


def test_http_exchange_redirects_are_refused(exchange: TokenExchangeServer) -> None:
    cred = TokenExchange.http(exchange.url, "service-token", namespace="ns")
    exchange.fail_with.append(307)
    with pytest.raises(TokenExchangeError) as moved:
        cred.token()
    assert moved.value.status == 307


def test_http_exchange_without_a_server_retries_then_fails() -> None:
    with TokenExchangeServer(b"k") as tx:
        url = tx.url
    clock = Clock()
    cred = TokenExchange.http(url, "t", namespace="ns", opener=NO_PROXY, sleep=clock.sleep)
    with pytest.raises(TokenExchangeError, match="failed") as down:
        cred.token()
    assert down.value.status == 0
    assert cred.exchanges == 4


# ---------------------------------------------------------------- the server's check


def test_server_check_refuses_bad_tokens_and_other_namespaces() -> None:
    secret = b"k"
    prefix = ResourceKey("dashboard.grafana.app", "dashboards", "stacks-1")
    good = mint_access_token(secret, "stacks-1")
    bad = {
        "wrong key": mint_access_token(b"other", "stacks-1"),
        "expired": mint_access_token(secret, "stacks-1", expires_at=time.time() - 1),
        "audience": mint_access_token(secret, "stacks-1", audiences=["elsewhere"]),
    }
    check = AccessTokenCheck(secret, require_id_token=True)
    with ResourceStoreServer(auth=check) as srv:

        def client(token: str, id_token: str | None = "user") -> ResourceStoreClient:
            cred = TokenExchange(lambda: ExchangedToken(token, time.time() + 600))
            return ResourceStoreClient(srv.address, access_token=cred, id_token=id_token)

        with client(good) as c:
            c.create(prefix.with_name("a"), {"spec": {}})
            assert c.is_healthy()
            with pytest.raises(ForbiddenError, match="for namespace 'stacks-1', not 'x'"):
                c.bulk(prefix.with_name("", namespace="x"), [])
        for token in bad.values():
            with client(token) as c, pytest.raises(UnauthorizedError):
                c.read(prefix.with_name("a"))
        with client(good, id_token=None) as c, pytest.raises(UnauthorizedError, match="Id"):
            c.read(prefix.with_name("a"))
        with ResourceStoreClient(srv.address) as c:
            assert c.is_healthy()  # health checks need no token
    assert check.seen[0]["x-access-token"] == good


def test_the_async_client_exchanges_off_the_loop_and_once() -> None:
    secret = b"k"
    prefix = ResourceKey("dashboard.grafana.app", "dashboards", "stacks-1")
    calls = []

    def slow_exchange() -> ExchangedToken:  # a blocking HTTP call, say
        calls.append(1)
        time.sleep(0.3)
        return ExchangedToken(mint_access_token(secret, "stacks-1"), time.time() + 600)

    async def main(address: str) -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        cred = TokenExchange(slow_exchange)
        async with AsyncResourceStoreClient(address, access_token=cred) as c:
            task = asyncio.create_task(ticker())
            await asyncio.gather(*(c.create(prefix.with_name(f"o{i}"), {}) for i in range(5)))
            task.cancel()
        return ticks

    with ResourceStoreServer(auth=AccessTokenCheck(secret)) as srv:
        ticks = asyncio.run(main(srv.address))
    assert len(calls) == 1
    assert ticks >= 10  # the loop ran while the exchange blocked its thread
