"""Builds csrc/ with CMake into a shared library placed inside the onnx_pools package, and installs with the package
what its command line needs outside a source checkout: the bundled models (onnx_pools/models/*.onnx)."""

import glob
import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_ext):
    def get_ext_filename(self, fullname):
        # A plain shared library loaded by ONNX Runtime, not a Python extension module.
        return os.path.join(*fullname.split(".")) + ".so"  # called with dotted and with bare names

    def build_extension(self, ext):
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = [
            "cmake",
            "-S",
            ROOT,
            "-B",
            build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DONNX_POOLS_OUTPUT_DIR={out_dir}",
        ]
        if os.environ.get("ONNXRUNTIME_INCLUDE_DIR"):
            configure.append(f"-DONNXRUNTIME_INCLUDE_DIR={os.environ['ONNXRUNTIME_INCLUDE_DIR']}")
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "-j", str(min(os.cpu_count() or 2, 2))])


class BuildPyWithData(build_py):
    """The package plus the bundled models, kept elsewhere in the checkout: models/*.onnx -> onnx_pools/models/."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "onnx_pools")
        models = sorted(glob.glob(os.path.join(ROOT, "models", "*.onnx")))
        os.makedirs(os.path.join(package, "models"), exist_ok=True)
        for path in models:
            self.copy_file(path, os.path.join(package, "models", os.path.basename(path)))

    def get_outputs(self, include_bytecode=1):
        package = os.path.join(self.build_lib, "onnx_pools")
        extra = [
            os.path.join(package, "models", os.path.basename(p))
            for p in glob.glob(os.path.join(ROOT, "models", "*.onnx"))
        ]
        return super().get_outputs(include_bytecode) + extra


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        # No Python C-API use: one wheel serves every Python 3 on this platform. The platform tag is the build
        # machine's (linux_x86_64); scripts/wheel_check.sh retags it manylinux with auditwheel repair.
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    ext_modules=[Extension("onnx_pools.libonnx_pools", sources=[])],
    cmdclass={"build_ext": BuildWithCMake, "build_py": BuildPyWithData, "bdist_wheel": PlatformWheel},
)
