import os
import platform


def pytest_report_header(config):
    kind = os.environ.get("APN_LAB_KERNEL", "host")
    return [f"kernel: {platform.release()} ({kind}), uid {os.geteuid()}, {os.cpu_count()} CPU"]
