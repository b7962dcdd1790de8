"""Where the service may send requests of its own (webhook deliveries), and how it sends them.

A URL is parsed once, the same way at registration and at delivery (`Target.of`): what cannot be parsed or
connected to is refused when it is registered, never discovered by the sender. By default a delivery goes
only to global unicast addresses: not loopback, private (RFC 1918), link-local (and so the cloud metadata
address 169.254.169.254), shared CGNAT space, unique-local IPv6, multicast or reserved ranges, in any
spelling (2130706433, 0x7f000001, 127.1, [::ffff:127.0.0.1], NAT64's 64:ff9b::/96). The check is made on
the addresses the host name resolves to at delivery time, and the connection goes to the address checked,
so that a DNS answer that changes between the check and the connection (rebinding) cannot get around it.
An operator allows named internal receivers with WEBHOOK_ALLOWED_NETWORKS (networks such as 10.1.2.0/24, or
host names).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
DEFAULT_PORTS = {"http": 80, "https": 443}


class Refused(Exception):
    """The request may not be sent (or not to this address): the reason is safe to show its owner."""


@dataclass(frozen=True)
class Target:
    """Where a URL says to send: scheme, host (without brackets), port, and the request target."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        """The URL parsed as the sender sends it; Refused (with why) when it cannot be sent."""
        try:
            parts = urlsplit(url)
            port = parts.port  # raises on a port out of range or not a number
        except ValueError as error:
            raise Refused(f"Not a URL the sender can use: {error}.") from None
        if parts.scheme not in DEFAULT_PORTS:
            raise Refused("Only http and https URLs are called.")
        if parts.username is not None or parts.password is not None:
            raise Refused("Must not contain credentials (user:password@): verify the signature instead.")
        host = parts.hostname
        if not host:
            raise Refused("Names no host.")
        if port == 0:
            raise Refused("Port 0 cannot be connected to.")
        if ":" in host:
            try:
                address = ipaddress.IPv6Address(host)
            except ValueError:
                raise Refused(f"[{host}] is not an IPv6 address.") from None
            if address.is_unspecified:
                raise Refused(f"[{host}] is the unspecified address, which cannot be connected to.")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], path)


def literal_address(host: str) -> Address | None:
    """The address a host written as an IP literal means, in any spelling the resolver accepts (127.1,
    2130706433, 0x7f000001, ::ffff:7f00:1), or None for a host name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))  # the resolver's old spellings
    except OSError:
        return None


def _underlying(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, or NAT64's well-known prefix), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


@dataclass(frozen=True)
class Policy:
    """Which addresses requests may go to: global unicast ones, and those `allowed` names."""

    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def allowing(cls, entries: Iterable[str]) -> Policy:
        """A policy from WEBHOOK_ALLOWED_NETWORKS' entries: networks (10.0.0.0/8, 127.0.0.1) or host names."""
        networks, hosts = [], set()
        for entry in (entry.strip() for entry in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hosts))

    def why_not(self, address: Address) -> str | None:
        """Why a request may not go to `address`, or None when it may."""
        checked = _underlying(address)
        if any(checked in network or address in network for network in self.networks):
            return None
        if checked.is_global and not checked.is_multicast:
            return None
        return f"{address}, not a public address (loopback, private, link-local, shared or reserved)"

    def check_literal(self, target: Target) -> None:
        """Refused when the target's host is an IP literal the policy does not allow (host names are
        checked when they are resolved, at delivery)."""
        if target.host.lower().rstrip(".") in self.hosts:
            return
        address = literal_address(target.host)
        if address is not None and (reason := self.why_not(address)) is not None:
            raise Refused(f"Deliveries to {reason}, are not allowed (WEBHOOK_ALLOWED_NETWORKS can allow it).")

    def addresses(self, target: Target) -> list[str]:
        """The addresses to connect to for `target`, each allowed, resolved now; Refused when the name does
        not resolve or any address it resolves to is not allowed (an answer mixing them is refused whole)."""
        try:
            found = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise Refused(f"{target.host} does not resolve.") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        if target.host.lower().rstrip(".") not in self.hosts:
            for text in addresses:
                reason = self.why_not(ipaddress.ip_address(text.split("%")[0]))
                if reason is not None:
                    raise Refused(f"{target.host} resolves to {reason}: not delivered.")
        return addresses


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to `address`, whatever the host name resolves to by now (the Host header is the
    name's)."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As _PinnedHTTPConnection, over TLS: the certificate is checked against the host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def post(policy: Policy, url: str, body: bytes, headers: dict[str, str], timeout_seconds: float) -> int:
    """POST `body` to `url` under `policy`, to the first allowed address that answers; the status code
    (redirects are answers, never followed). Refused when the policy or the URL forbids it; OSError or
    http.client.HTTPException when no address gave an HTTP answer in time. The answer's body is not read."""
    target = Target.of(url)
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    failure: Exception = OSError("no address")
    for address in policy.addresses(target):
        connection = kind(target.host, target.port, address, timeout_seconds)
        try:
            connection.request("POST", target.path, body=body, headers=headers)
            return connection.getresponse().status
        except (OSError, http.client.HTTPException) as error:
            failure = error
        finally:
            connection.close()
    raise failure
