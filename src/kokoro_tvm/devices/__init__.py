"""Targets other than the build host: cross linking and running aarch64 libraries under
qemu-user."""
