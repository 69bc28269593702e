"""`torchrun` that also works with Debian 12's torch 1.13 on Python 3.11.

There, torchrun dies before starting any worker: ``Std.from_str("0")``
returns None because Python 3.11's IntFlag iteration skips the zero member
(and multi-bit ones), so the default ``--redirects 0`` cannot be parsed. This
wrapper fixes that parse when (and only when) it is broken, then runs
``torch.distributed.run`` unchanged: ``python3 torchrun_shim.py --nproc_per_node=2 train.py ...``.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api

if api.Std.from_str("0") is None:

    def _from_str(cls, vm):
        if re.fullmatch(r"\d", vm):
            return cls(int(vm))
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}

    api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
