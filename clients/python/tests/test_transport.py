"""The blocking client's connections have TCP_NODELAY (else a request with a
body waits some 40 ms for the delayed ACK of its headers), set through
httpx's public socket_options where httpx has it (0.24 and later), and
through a network backend swapped into the pool on httpx 0.23 alone."""

import socket
import unittest
from unittest import mock

import httpx

from policyrouter import Client, _transport

from tests._stub import LoopbackServer, reply


def nodelay_of_a_request(client: httpx.Client, url: str) -> int:
    """TCP_NODELAY of the connection a request went on, read from httpx's
    public network_stream extension."""
    with client.stream("POST", url + "/x", content=b"{}") as resp:
        sock = resp.extensions["network_stream"].get_extra_info("socket")
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


class NoDelayTest(unittest.TestCase):
    def setUp(self):
        self.server = LoopbackServer(lambda h, body: reply(h, 200, {}, {}))
        self.addCleanup(self.server.close)

    def test_the_client_sets_it_on_the_installed_httpx(self):
        with Client(self.server.url) as c:
            self.assertEqual(nodelay_of_a_request(c.session, self.server.url), 1)
        with httpx.Client() as plain:  # the check can tell: httpx alone does not set it
            self.assertEqual(nodelay_of_a_request(plain, self.server.url), 0)

    def test_httpx_0_23_path(self):
        if not httpx.__version__.startswith("0.23."):
            self.skipTest(f"httpx {httpx.__version__}: the 0.23 path is not taken")
        transport = httpx.HTTPTransport()
        self.assertTrue(_transport._nodelay_on_httpx_0_23(transport))
        # Anything but 0.23's pool is left alone.
        other = mock.Mock(spec=[])
        self.assertFalse(_transport._nodelay_on_httpx_0_23(other))

    def test_socket_options_path(self):
        # httpx >= 0.24 takes socket_options: the public way, and nothing
        # private is touched. Played here by a transport class that takes it.
        made = []

        class Transport(httpx.HTTPTransport):
            def __init__(self, *, socket_options=None, **kw):
                made.append(socket_options)
                super().__init__(**kw)

        with mock.patch.object(_transport.httpx, "HTTPTransport", Transport), \
                mock.patch.object(_transport, "_nodelay_on_httpx_0_23") as private:
            t = _transport.sync_transport(True, None, _transport.transport_limits(4), 0)
        self.assertIsInstance(t, Transport)
        self.assertEqual(made, [[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]])
        private.assert_not_called()

    def test_other_versions_without_socket_options_are_left_alone(self):
        with mock.patch.object(_transport.httpx, "__version__", "0.22.0"), \
                mock.patch.object(_transport, "_nodelay_on_httpx_0_23") as private:
            _transport.sync_transport(True, None, _transport.transport_limits(4), 0)
        private.assert_not_called()


if __name__ == "__main__":
    unittest.main()
