"""The web UI's protections, as one ASGI middleware: a trace is untrusted data and the server listens on loopback.

- Requests whose Host header is not a loopback name are refused (421): a web page whose domain an attacker re-points
  at 127.0.0.1 (DNS rebinding) still sends its own name, so it cannot read the API.
- Every response carries a strict Content-Security-Policy (scripts, styles and workers from this server only: no
  inline script, no event-handler attributes, no eval), `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY`
  and no referrer."""
from __future__ import annotations
from typing import Any, Awaitable, Callable

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})

CSP = ("default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

SECURITY_HEADERS = [
  (b"content-security-policy", CSP.encode()),
  (b"x-content-type-options", b"nosniff"),
  (b"x-frame-options", b"DENY"),
  (b"referrer-policy", b"no-referrer"),
  (b"cross-origin-opener-policy", b"same-origin"),
  (b"cross-origin-resource-policy", b"same-origin"),
]

def host_name(host: str) -> str:
  """`127.0.0.1:8000` -> `127.0.0.1`, `[::1]:8000` -> `[::1]`, lower case."""
  host = host.strip().lower()
  if host.startswith("["): return host[:host.find("]") + 1] if "]" in host else host
  return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

class SecurityMiddleware:
  def __init__(self, app: Callable, allowed_hosts: frozenset[str] = LOOPBACK_NAMES):
    self.app, self.allowed_hosts = app, frozenset(h.lower() for h in allowed_hosts)

  async def __call__(self, scope: dict, receive: Callable, send: Callable[[dict], Awaitable[None]]) -> None:
    if scope["type"] != "http": return await self.app(scope, receive, send)
    host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
    async def send_with_headers(message: dict[str, Any]) -> None:
      if message["type"] == "http.response.start":
        names = {k.lower() for k, _ in message.get("headers", ())}
        message["headers"] = list(message.get("headers", ())) + [h for h in SECURITY_HEADERS if h[0] not in names]
      await send(message)
    if host_name(host) not in self.allowed_hosts:
      body = (f"421: this server answers only to {', '.join(sorted(self.allowed_hosts))} "
              f"(the request was for another host name)\n").encode()
      await send_with_headers({"type": "http.response.start", "status": 421,
                               "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                           (b"content-length", str(len(body)).encode())]})
      await send({"type": "http.response.body", "body": body})
      return
    await self.app(scope, receive, send_with_headers)
