"""The Spark itself: a GB10 check, the driver branch held, the drm override removed, the memory guard, reboots."""
