"""``make soak``: seeded fault schedules through the deployed stack, checked on the whole history."""
