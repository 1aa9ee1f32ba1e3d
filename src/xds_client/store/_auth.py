"""Service authentication as Grafana's own clients do it: token exchange and ID tokens.

Grafana's services call unified storage with two headers (grafana/authlib's gRPC
client interceptor):

- ``X-Access-Token``: a token for the service, obtained by *token exchange*: a POST
  to the exchange URL with the service's own token as ``Authorization: Bearer``
  and ``{"namespace": ..., "audiences": ["resourceStore"]}`` as JSON; the answer
  is ``{"data": {"token": ...}}``. The token is a JWT whose ``exp`` says how long
  it lives; it is kept until 15 s before then, one exchange runs at a time, and
  an exchange answered 429 or 5xx (or not answered) is retried three times
  (250 ms doubling to 1 s). The server refuses a token for another namespace.
- ``X-Id-Token``: the user's ID token, when the call is made for a user.

:class:`TokenExchange` is the credential a client takes (``access_token=``): any
callable that returns a token and its expiry, or :meth:`TokenExchange.http`,
the exchange over HTTP with the standard library. The decisions (cache,
retries, the request and the answer) are plain functions and values here, so
they are tested with a fake clock; the only I/O is :class:`HttpTokenExchanger`.

Secrets stay out of sight: reprs show ``[redacted]``, errors name the URL and the
status, never a token.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xds_client.errors import UsageError
from xds_client.store._errors import UnauthorizedError

__all__ = [
    "ACCESS_TOKEN_KEY",
    "ID_TOKEN_KEY",
    "ExchangeBackoff",
    "ExchangedToken",
    "HttpTokenExchanger",
    "IdToken",
    "TokenCache",
    "TokenExchange",
    "TokenExchangeError",
    "call_metadata",
    "exchange_body",
    "jwt_expiry",
    "parse_exchange_response",
]

ACCESS_TOKEN_KEY = "x-access-token"
"""The access token's metadata key (Grafana's ``X-Access-Token``; gRPC keys are lowercase)."""
ID_TOKEN_KEY = "x-id-token"
"""The user's ID token's metadata key (Grafana's ``X-Id-Token``)."""
DEFAULT_AUDIENCE = "resourceStore"
"""The audience unified storage accepts."""
CACHE_LEEWAY = 15.0
"""An exchanged token is used until this many seconds before it expires."""

_REDACTED = "[redacted]"

IdToken = str | Callable[[], "str | None"] | None
"""The user's ID token: a string, a callable asked at each call (None: no user), or None."""


class TokenExchangeError(UnauthorizedError):
    """The access token could not be obtained from the token exchange.

    ``status`` is the exchange's HTTP status (0 when it did not answer). It is a
    :class:`UnauthorizedError`, so handlers of a refused identity catch it too.
    """

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message, code=401, reason="TokenExchangeFailed")
        self.status: int = status
        """The HTTP status of the exchange (0: no answer, e.g. connection refused)."""

    @property
    def retryable(self) -> bool:
        """Worth another try: no answer, 429 or a 5xx (as Grafana's client retries)."""
        return self.status in {0, 429} or self.status >= 500


@dataclass(frozen=True, slots=True)
class ExchangedToken:
    """An access token and when it expires (seconds since the epoch; 0: unknown)."""

    token: str = field(repr=False)
    """The token itself (never shown)."""
    expires_at: float = 0.0
    """Expiry as a Unix time; 0 means unknown, and such a token is not cached."""

    def __repr__(self) -> str:
        return f"ExchangedToken({_REDACTED}, expires_at={self.expires_at})"

    @classmethod
    def of(cls, value: ExchangedToken | tuple[str, float] | str) -> ExchangedToken:
        """Accept what a fetch callable returns: this type, ``(token, expires_at)``, or a JWT."""
        if isinstance(value, ExchangedToken):
            return value
        if isinstance(value, str):
            return cls(value, jwt_expiry(value))
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            return cls(value[0], float(value[1]))
        raise UsageError(
            "a token exchange must return an ExchangedToken, (token, expires_at) or a JWT, "
            f"not {type(value).__name__}"
        )


@dataclass(frozen=True, slots=True)
class ExchangeBackoff:
    """Retries of a failed exchange (Grafana's client: 250 ms doubling to 1 s, 3 retries)."""

    initial: float = 0.25
    """Seconds before the first retry."""
    maximum: float = 1.0
    """The longest wait between tries."""
    retries: int = 3
    """Retries after the first try."""

    def delay(self, failures: int, error: TokenExchangeError) -> float | None:
        """Seconds to wait after the ``failures``-th failure, or None to give up."""
        if not error.retryable or failures > self.retries:
            return None
        return float(min(self.maximum, self.initial * 2 ** (failures - 1)))


class TokenCache:
    """The one token kept: valid until ``leeway`` seconds before it expires. No I/O."""

    def __init__(self, leeway: float = CACHE_LEEWAY) -> None:
        self.leeway = leeway
        self._token: ExchangedToken | None = None

    def __repr__(self) -> str:
        held = "empty" if self._token is None else f"until {self._token.expires_at}"
        return f"<TokenCache {held}>"

    def get(self, now: float) -> str | None:
        """The kept token, or None when there is none or it is about to expire."""
        token = self._token
        if token is None or now >= token.expires_at - self.leeway:
            return None
        return token.token

    def put(self, token: ExchangedToken) -> None:
        """Keep ``token`` (one without an expiry is not kept: each call exchanges again)."""
        self._token = token if token.expires_at > 0 else None

    def clear(self) -> None:
        """Forget the token (the next call exchanges)."""
        self._token = None


def jwt_expiry(token: str) -> float:
    """The ``exp`` claim of a JWT, read without checking the signature; 0 if there is none.

    Grafana's client does the same: the token is the server's business, the
    client only needs to know how long to keep it.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return 0.0
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except (ValueError, binascii.Error):
        return 0.0
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else 0.0


def exchange_body(namespace: str, audiences: Sequence[str]) -> bytes:
    """The JSON of an exchange request (Grafana's ``TokenExchangeRequest``)."""
    return json.dumps({"namespace": namespace, "audiences": list(audiences)}).encode()


def parse_exchange_response(status: int, body: bytes, *, url: str) -> ExchangedToken:
    """The token in an exchange's answer; :class:`TokenExchangeError` for anything else.

    Success is 200 with ``{"data": {"token": "..."}}``; a refusal may carry
    ``{"error": "..."}``, which the error repeats (it is the server's text, not a token).
    """
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        doc = None
    if status != 200:
        reason = doc.get("error") if isinstance(doc, dict) else None
        detail = f": {reason}" if isinstance(reason, str) and reason else ""
        raise TokenExchangeError(f"token exchange {url} answered {status}{detail}", status=status)
    data = doc.get("data") if isinstance(doc, dict) else None
    token = data.get("token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise TokenExchangeError(
            f"token exchange {url} answered 200 without data.token", status=status
        )
    return ExchangedToken(token, jwt_expiry(token))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the service token to another address: refuse it."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpTokenExchanger:
    """One token exchange over HTTP(S), with ``urllib`` (no extra dependency).

    Calling it POSTs the request and returns an :class:`ExchangedToken`, or raises
    :class:`TokenExchangeError` (with the HTTP status). Redirects are refused, so
    the service token goes nowhere but ``url``. Proxies come from the
    environment, as for any ``urllib`` request, unless ``opener`` is given.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        namespace: str,
        audiences: Sequence[str] = (DEFAULT_AUDIENCE,),
        timeout: float = 10.0,
        opener: urllib.request.OpenerDirector | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"token exchange URL must be http(s)://..., not {url!r}")
        if not token:
            raise UsageError("token exchange needs the service's token")
        if not namespace:
            raise UsageError("token exchange needs a namespace ('*' for every namespace)")
        if not audiences:
            raise UsageError("token exchange needs at least one audience")
        self.url = url
        """Where tokens are exchanged."""
        self.namespace = namespace
        """The namespace the tokens are for (``*``: all)."""
        self.audiences = tuple(audiences)
        """The audiences the tokens are for."""
        self.timeout = timeout
        """Seconds one exchange may take."""
        self._token = token
        self._opener = opener or urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return (
            f"<HttpTokenExchanger {self.url} namespace={self.namespace!r} "
            f"audiences={list(self.audiences)} token={_REDACTED}>"
        )

    def request(self) -> urllib.request.Request:
        """The HTTP request of one exchange (built, not sent)."""
        return urllib.request.Request(
            self.url,
            data=exchange_body(self.namespace, self.audiences),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "xds-client",
                # Grafana's client sends these for system tokens; others ignore them.
                "X-Org-ID": "0",
                "X-Realms": '[{"type": "system", "identifier": "system"}]',
            },
        )

    def __call__(self) -> ExchangedToken:
        try:
            with self._opener.open(self.request(), timeout=self.timeout) as resp:
                status, body = int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
            exc.close()
        except (OSError, ValueError) as exc:  # URLError, timeouts, refused connections
            reason = getattr(exc, "reason", None) or exc
            raise TokenExchangeError(f"token exchange {self.url} failed: {reason}") from None
        return parse_exchange_response(status, body, url=self.url)


class TokenExchange:
    """The ``X-Access-Token`` credential of the store clients (``access_token=``).

    ``fetch`` does one exchange and returns an :class:`ExchangedToken`, a
    ``(token, expires_at)`` pair (Unix time) or a JWT (its ``exp`` is the expiry);
    it raises :class:`TokenExchangeError` on failure (``status`` 429, 5xx or 0 are
    retried per ``backoff``). The token is kept until ``leeway`` seconds before it
    expires; one exchange runs at a time, whatever the number of threads or
    clients sharing the credential. ``clock`` (Unix time) and ``sleep`` are for
    tests. :meth:`http` builds one that exchanges over HTTP.
    """

    def __init__(
        self,
        fetch: Callable[[], ExchangedToken | tuple[str, float] | str],
        *,
        leeway: float = CACHE_LEEWAY,
        backoff: ExchangeBackoff = ExchangeBackoff(),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.fetch = fetch
        """What does one exchange."""
        self.backoff = backoff
        """Retries of a failed exchange."""
        self.exchanges = 0
        """How many exchanges were attempted (tries and retries)."""
        self._cache = TokenCache(leeway)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()  # one exchange in flight

    @classmethod
    def http(
        cls,
        url: str,
        token: str,
        *,
        namespace: str,
        audiences: Sequence[str] = (DEFAULT_AUDIENCE,),
        timeout: float = 10.0,
        opener: urllib.request.OpenerDirector | None = None,
        **options: Any,
    ) -> TokenExchange:
        """Exchange ``token`` (the service's) at ``url`` for tokens of ``namespace``."""
        exchanger = HttpTokenExchanger(
            url, token, namespace=namespace, audiences=audiences, timeout=timeout, opener=opener
        )
        return cls(exchanger, **options)

    def __repr__(self) -> str:
        return f"<TokenExchange {self.fetch!r} {self._cache!r}>"

    def cached(self) -> str | None:
        """The kept token if it is still good; never exchanges (safe on an event loop)."""
        return self._cache.get(self._clock())

    def invalidate(self) -> None:
        """Forget the kept token: the next call exchanges again."""
        self._cache.clear()

    def token(self) -> str:
        """A good access token, exchanging (and retrying) when needed; blocks meanwhile."""
        token = self.cached()
        if token is not None:
            return token
        with self._lock:
            token = self.cached()  # another thread may have exchanged meanwhile
            if token is not None:
                return token
            failures = 0
            while True:
                self.exchanges += 1
                try:
                    fresh = ExchangedToken.of(self.fetch())
                except TokenExchangeError as exc:
                    failures += 1
                    delay = self.backoff.delay(failures, exc)
                    if delay is None:
                        raise
                    self._sleep(delay)
                    continue
                self._cache.put(fresh)
                return fresh.token


def id_token_of(source: IdToken) -> str | None:
    """The user's ID token now (a callable is asked; empty means none)."""
    value = source() if callable(source) else source
    return value or None


def call_metadata(
    static: tuple[tuple[str, str], ...], access_token: str | None, id_token: str | None
) -> tuple[tuple[str, str], ...]:
    """Call metadata: the static pairs, then the access token and the ID token if any."""
    extra: list[tuple[str, str]] = []
    if access_token:
        extra.append((ACCESS_TOKEN_KEY, access_token))
    if id_token:
        extra.append((ID_TOKEN_KEY, id_token))
    return (*static, *extra) if extra else static
