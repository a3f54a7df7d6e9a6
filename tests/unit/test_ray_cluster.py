"""rundir/ray_cluster.py: a population's cluster address and CPUs checked
before anything is made (Ray itself is not started here)."""

import socket

import pytest

from rundir import ray_cluster
from rundir.ray_cluster import ClusterError


@pytest.mark.parametrize('address, parsed', [
    ('auto', None), ('127.0.0.1:6379', ('127.0.0.1', 6379)), ('head-node:1', ('head-node', 1)),
    ('[::1]:6379', ('::1', 6379))])
def test_good_addresses_parse(address, parsed):
  assert ray_cluster.parse_address(address) == parsed


@pytest.mark.parametrize('address', ['127.0.0.1', ':6379', 'host:', 'host:port', 'host:0',
                                     'host:70000', 'Auto'])
def test_a_malformed_address_is_one_line(address):
  with pytest.raises(ClusterError) as e:
    ray_cluster.parse_address(address)
  assert str(e.value) == (f"--address must be 'auto' or host:port (a port in 1-65535), not "
                          f'{address!r}')


def test_an_address_nothing_answers_at_is_named():
  with socket.socket() as s:   # bound, never listening: connections are refused
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    with pytest.raises(ClusterError) as e:
      ray_cluster.check_answers('127.0.0.1', port, seconds=2)
  assert str(e.value).startswith(f'nothing answers at 127.0.0.1:{port} within 2 s (')
  assert str(e.value).endswith(f'start the cluster (ray start --head --port={port}) or fix '
                               '--address')


def test_an_address_that_answers_passes():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    s.listen(1)
    ray_cluster.check_answers('127.0.0.1', s.getsockname()[1], seconds=2)


def test_members_at_once_and_a_member_that_cannot_fit():
  assert ray_cluster.check_fits(2, 0.5, 'this machine') == 4
  assert ray_cluster.check_fits(2, 2, 'this machine') == 1
  with pytest.raises(ClusterError) as e:
    ray_cluster.check_fits(2, 4, 'this machine')
  assert str(e.value) == ('pbt.cpus_per_member is 4 but this machine has 2 CPU(s): no member '
                          'could ever start. Set --config.pbt.cpus_per_member to at most 2')
