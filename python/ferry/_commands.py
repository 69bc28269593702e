"""Finding the Go commands (dataprep, ckptmerge, ferry-serve) that the
ferry wheel installs beside the package.

``pip install ferry-*.whl`` puts the commands in the environment's scripts
directory (``<venv>/bin``), which is on PATH only when the environment is
activated; Ray workers, cron jobs and ``python -m`` runs often start the
venv's Python without it. :func:`find` therefore looks, in this order:

1. ``$FERRY_<NAME>`` (``FERRY_DATAPREP``, ``FERRY_CKPTMERGE``,
   ``FERRY_SERVE``...): an explicit path wins;
2. the scripts directory of this interpreter's installation (where pip put
   the wheel's copy, the one that matches this ``ferry`` package), then the
   user scheme's (``pip install --user``);
3. ``PATH`` (a checkout's ``bin/`` after ``make build``, or a system copy).
"""

import os
import shutil
import sysconfig

from .errors import FerryError


class CommandNotFoundError(FerryError, FileNotFoundError):
    """A ferry command is neither where the wheel installs it nor on PATH."""


def _env_name(name):
    return "FERRY_" + name.upper().replace("-", "_").removeprefix("FERRY_")


def _is_exe(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find(name):
    """The path of the ferry command ``name`` (``"dataprep"``...); raises
    :class:`CommandNotFoundError` naming every place it looked."""
    looked = []
    env = _env_name(name)
    explicit = os.environ.get(env)
    if explicit:
        if _is_exe(explicit):
            return explicit
        raise CommandNotFoundError(f"${env}={explicit} is not an executable file")
    looked.append(f"${env} (unset)")
    dirs = []
    for scheme in (None, f"{os.name}_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if d and d not in dirs:
            dirs.append(d)
    for d in dirs:
        cand = os.path.join(d, name)
        if _is_exe(cand):
            return cand
        looked.append(cand)
    found = shutil.which(name)
    if found:
        return found
    looked.append(f"PATH={os.environ.get('PATH', '')}")
    raise CommandNotFoundError(
        f"{name} not found (looked at {', '.join(looked)}): install the ferry wheel (`make wheel`, then "
        f"pip install dist/ferry-*.whl) into this environment, put {name} on PATH, or set ${env}")
