"""A throwaway PostgreSQL server for the tests, from the binaries on the machine.

`initdb` and `pg_ctl` on a temporary directory, listening only on a Unix socket in that directory.
PostgreSQL refuses to run as root, so as root every server command runs as the `postgres` system
user (`runuser -u postgres --`), which then owns the directory. The binaries are found from
`PG_BINDIR`, else `pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`. A server
that cannot start is a test failure, never a skip: `PostgresServer.start` raises with the log.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_bindir() -> Path:
    candidates: list[Path] = []
    if os.environ.get('PG_BINDIR'):
        candidates.append(Path(os.environ['PG_BINDIR']))
    pg_config = shutil.which('pg_config')
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            candidates.append(Path(subprocess.check_output([pg_config, '--bindir'], text=True).strip()))
    installed = Path('/usr/lib/postgresql').glob('*/bin')
    candidates += sorted(
        installed, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True
    )
    for candidate in candidates:
        if (candidate / 'initdb').exists() and (candidate / 'pg_ctl').exists():
            return candidate
    raise RuntimeError(
        'no PostgreSQL server binaries (initdb, pg_ctl) found: set PG_BINDIR, put pg_config on PATH, '
        'or install the postgresql package'
    )


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; `url(db)` connects over its Unix socket."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.as_root = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix='pydantic-ai-context-pg-'))
        self.data = self.dir / 'data'
        self.log = self.dir / 'server.log'
        # No TCP: the port only names the socket file, but keep it unlikely to clash anyway.
        self.port = random.randint(20_000, 60_000)
        if self.as_root:
            runuser = shutil.which('runuser')
            if runuser is None:
                raise RuntimeError('running as root, but runuser is missing: PostgreSQL will not run as root')
            try:
                user = pwd.getpwnam('postgres')
            except KeyError:
                raise RuntimeError(
                    'running as root, but there is no postgres system user to run the server'
                ) from None
            self.prefix = [runuser, '-u', 'postgres', '--']
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        else:
            self.prefix = []
        os.chmod(self.dir, 0o700)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, *args], capture_output=True, text=True, check=check, timeout=60, cwd=self.dir
        )

    def url(self, dbname: str = 'postgres') -> str:
        return f'postgresql://postgres@/{dbname}?host={self.dir}&port={self.port}'

    def start(self) -> None:
        try:
            if not self.data.exists():
                self._run(
                    str(self.bindir / 'initdb'), '-D', str(self.data), '-U', 'postgres', '-A', 'trust',
                    '-E', 'UTF8', '--no-sync',
                )  # fmt: skip
            options = (
                f"-k {self.dir} -p {self.port} -c listen_addresses='' -c fsync=off "
                '-c full_page_writes=off -c max_connections=200'
            )
            self._run(
                str(self.bindir / 'pg_ctl'),
                '-D',
                str(self.data),
                '-o',
                options,
                '-l',
                str(self.log),
                '-w',
                'start',
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            log = self.log.read_text() if self.log.exists() else ''
            output = getattr(e, 'stderr', '') or ''
            raise RuntimeError(f'PostgreSQL did not start ({e}):\n{output}\n{log}') from e

    def stop(self, mode: str = 'fast') -> None:
        self._run(str(self.bindir / 'pg_ctl'), '-D', str(self.data), '-m', mode, '-w', 'stop', check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop('immediate')
        shutil.rmtree(self.dir, ignore_errors=True)
