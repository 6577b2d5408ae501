"""Fetching image URLs at the HTTP edge, on the event loop (network waits, no CPU work), before
the request's inputs go to the CPU pool; off unless `--allowed-media-domains` names hosts.

Every hop is checked the same way: http or https, no credentials in the URL, a host the policy
names, and every address it resolves to public, unless the host is named exactly (a wildcard
".example.com" never reaches a private or loopback address; "127.0.0.1" or "localhost" named
outright does). The connection goes to the address that was checked (the host's name kept for
the `Host` header and TLS), so a name that resolves elsewhere a moment later cannot redirect
it. Redirects are followed only to URLs that pass the same checks, at most `MAX_REDIRECTS`.
A body is read up to the image byte limit (413 past it), the whole fetch within the policy's
time limit; every failure is a 400 that names the input and the URL.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urljoin, urlsplit

import httpx

from poolserve.errors import InvalidRequestError, PayloadTooLargeError, PoolserveError, echoed
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.inputs.images.sources import SEND_INSTEAD, ImageInput

MAX_REDIRECTS = 3
# URLs of one request fetched at once.
FETCHES_AT_ONCE = 8


async def fetch_urls(
    fetcher: MediaFetcher | None,
    images: Sequence[tuple[str, ImageInput]],
    param_of: Callable[[str], str],
) -> None:
    """Fetch the URL images among `images` (each with its input's name) with `fetcher`; with
    none (no --allowed-media-domains), the first URL is a 400 that says how to send it. An
    error names the field that holds the image (`param_of(its name)`)."""
    if fetcher is not None:
        await fetcher.fetch(images, param_of)
        return
    for where, image in images:
        param = param_of(where)
        if image.url is not None:
            raise InvalidRequestError(
                f"{where} is a URL ({echoed(image.url)}); this server fetches no URLs (start it "
                f"with --allowed-media-domains to name hosts it may fetch from); {SEND_INSTEAD}",
                param=param,
            )


class MediaFetcher:
    """One server's fetcher of image URLs (its own connection pool; close it at shutdown)."""

    def __init__(self, policy: MediaPolicy) -> None:
        self.policy = policy
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the checked address is the peer
            timeout=policy.fetch_timeout,
            headers={"user-agent": "poolserve"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(
        self, images: Sequence[tuple[str, ImageInput]], param_of: Callable[[str], str]
    ) -> None:
        """Fill in each URL image's `fetched` bytes (`images`: each with its input's name)."""
        wanted = [(where, image) for where, image in images if image.url is not None]
        gate = asyncio.Semaphore(FETCHES_AT_ONCE)

        async def one(where: str, image: ImageInput) -> None:
            async with gate:
                assert image.url is not None
                image.fetched = await self._fetch(image.url, where, param_of(where))

        try:
            # The first refusal cancels the other fetches.
            async with asyncio.TaskGroup() as group:
                for where, image in wanted:
                    group.create_task(one(where, image))
        except ExceptionGroup as failures:
            raise failures.exceptions[0] from None

    async def _fetch(self, url: str, where: str, param: str) -> bytes:
        try:
            async with asyncio.timeout(self.policy.fetch_timeout):
                for _ in range(MAX_REDIRECTS + 1):
                    location, body = await self._get(url, where, param)
                    if location is None:
                        return body
                    url = location
        except TimeoutError:
            raise self._refused(
                where, url, f"it took more than {self.policy.fetch_timeout:g} s", param
            ) from None
        except httpx.HTTPError as exc:
            raise self._refused(where, url, f"{type(exc).__name__}: {exc}", param) from None
        except PoolserveError:
            raise  # a refusal of ours (an InvalidRequestError is a ValueError too)
        except (ValueError, httpx.InvalidURL) as exc:
            # urllib's parser (a port out of range or not a number), httpx's (too long, a NUL
            # or a control character), IDNA (a label too long): the URL, or a redirect's.
            raise self._refused(where, url, f"it is not a valid URL ({exc})", param) from None
        raise self._refused(where, url, f"more than {MAX_REDIRECTS} redirects", param)

    async def _get(self, url: str, where: str, param: str) -> tuple[str | None, bytes]:
        """One hop: (None, the body), or (the URL it redirects to, b"")."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme not in ("http", "https") or not host:
            raise self._refused(where, url, "only http and https URLs are fetched", param)
        if parts.username or parts.password:
            raise self._refused(where, url, "a URL with credentials is not fetched", param)
        if not self.policy.allows_host(host):
            raise self._refused(where, url, f"{host} is not in --allowed-media-domains", param)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = await self._checked_address(host, port, where, url, param)
        netloc = f"[{address}]" if ":" in address else address
        target = parts._replace(netloc=f"{netloc}:{port}").geturl()
        request = self._client.build_request(
            "GET",
            target,
            headers={"host": parts.netloc.rsplit("@", 1)[-1]},
            extensions={"sni_hostname": host} if parts.scheme == "https" else {},
        )
        response = await self._client.send(request, stream=True)
        try:
            if response.is_redirect:
                location = response.headers.get("location", "")
                return urljoin(url, location), b""
            if response.status_code != 200:
                raise self._refused(where, url, f"it answered {response.status_code}", param)
            return None, await self._body(response, where, url, param)
        finally:
            await response.aclose()

    async def _body(self, response: httpx.Response, where: str, url: str, param: str) -> bytes:
        limit = self.policy.max_image_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise self._too_large(where, url, int(declared), param)
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise self._too_large(where, url, len(body), param)
        return bytes(body)

    async def _checked_address(self, host: str, port: int, where: str, url: str, param: str) -> str:
        """An address of `host` to connect to; every one it resolves to must be public unless
        the host is named exactly in the allowed domains."""
        named = host.lower().rstrip(".") in {
            domain.lower().rstrip(".") for domain in self.policy.allowed_domains
        }
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise self._refused(where, url, f"{host} does not resolve ({exc})", param) from None
        addresses = [str(info[4][0]) for info in infos]
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if not ip.is_global and not named:
                raise self._refused(
                    where,
                    url,
                    f"{host} resolves to {address}, a private, loopback or reserved address, "
                    "which is fetched only from a host --allowed-media-domains names exactly",
                    param,
                )
        return addresses[0]

    @staticmethod
    def _refused(where: str, url: str, why: str, param: str) -> InvalidRequestError:
        return InvalidRequestError(
            f"{where}: the image URL {echoed(url)} was not fetched: {echoed(why)}; {SEND_INSTEAD}",
            param=param,
        )

    def _too_large(self, where: str, url: str, size: int, param: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"{where}: the image at {echoed(url)} has {size} bytes or more, more than the "
            f"{self.policy.max_image_bytes} one image may have here (--max-image-bytes)",
            param=param,
        )
