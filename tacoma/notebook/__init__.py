"""tacoma in IPython and Jupyter: `%load_ext tacoma`, then the `%%meet` cell magic.

    %%meet ag_python@127.0.0.1:7707 -f NAME=who -o greeting
    for name in bc.text("NAME"):
        bc.append("GREETING", "hello, " + name)

The only package of tacoma that imports IPython (an optional dependency: `pip install -e
'.[notebook]'` in a clone): `import tacoma` never loads it, and `tacoma.load_ipython_extension`
imports this package only when a notebook loads the extension. The rich displays
(briefcases, traced meets, local places, meet statuses, errors) are methods of those
values themselves (`_repr_html_`, `_render_traceback_`); loading the extension makes
IPython show those that carry what agents and places said escaped (`_views`).
"""

from ._magics import TacomaMagics as TacomaMagics
from ._magics import load_ipython_extension as load_ipython_extension

__all__ = ["TacomaMagics", "load_ipython_extension"]
