"""The build of the xdc package with libxdc inside it (docs/api.md, "Python"): one `pip install ./python`.

build_py puts libxdc.so in the package (xdc/libxdc.so, which `import xdc` loads after $XDC_LIB): the file
$XDC_BUNDLE_LIB names when set (a library already built, e.g. the tree's build/libxdc.so: nothing is
compiled), else the one `make build/libxdc.so` builds in the C tree. The C tree is python/'s parent in a
checkout, or libxdc-src/ in an sdist, where the sdist command copies the files that make reads
(`make libxdc-sources`), so `python -m build python/` (sdist, then the wheel from it) compiles too. The
wheel holds a native library: tagged for this platform, for any Python 3 (ctypes, no extension module).
"""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:  # setuptools >= 70.1 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
SDIST_TREE = "libxdc-src"  # the C tree's folder inside an sdist
BUNDLED = "libxdc.so"  # its name in the package (python/xdc/__init__.py loads it by this name)


def c_tree():
    """The folder whose Makefile builds libxdc.so: the sdist's copy, else the checkout around python/."""
    for root in (os.path.join(HERE, SDIST_TREE), os.path.dirname(HERE)):
        if os.path.isfile(os.path.join(root, "Makefile")) and os.path.isfile(os.path.join(root, "include", "xdc.h")):
            return root
    raise RuntimeError("xdc: no C tree to build libxdc.so from (neither %s/%s nor python/'s parent has the "
                       "Makefile and include/xdc.h); set XDC_BUNDLE_LIB to a built libxdc.so" % (HERE, SDIST_TREE))


def make(root, *args):
    """`make -C root ARGS` (quiet), its stdout; a failure raises with make's output."""
    cmd = ["make", "--no-print-directory", "-s", "-C", root] + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("xdc: `%s` exited %d:\n%s%s" % (" ".join(cmd), out.returncode, out.stdout, out.stderr))
    return out.stdout


def libxdc():
    """The libxdc.so to bundle: $XDC_BUNDLE_LIB, else built by the C tree's Makefile."""
    given = os.environ.get("XDC_BUNDLE_LIB")
    if given:
        if not os.path.isfile(given):
            raise RuntimeError("xdc: XDC_BUNDLE_LIB=%s is not a file" % given)
        return given
    root = c_tree()
    make(root, "-j%d" % (os.cpu_count() or 1), "build/libxdc.so")
    return os.path.join(root, "build", "libxdc.so")


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "xdc", BUNDLED)
        shutil.copyfile(libxdc(), dest)
        os.chmod(dest, 0o755)


class SdistWithTree(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = c_tree()
        for rel in make(root, "libxdc-sources").split():
            dest = os.path.join(base_dir, SDIST_TREE, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), dest)


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True  # libxdc.so is native code: a platform wheel, installed in platlib


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=NativeDistribution,
      cmdclass={"build_py": BuildPyWithLib, "sdist": SdistWithTree, "bdist_wheel": PlatformWheel})
