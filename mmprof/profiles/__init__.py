"""The Profile: mmprof's one file format for one run of N ranks."""

from mmprof.profiles.io import load_profile, save_profile
from mmprof.profiles.profile import Profile, ProfileBuilder, StringTable, merge_profiles
from mmprof.profiles.schema import SCHEMA_VERSION, TABLES

__all__ = ["Profile", "ProfileBuilder", "StringTable", "merge_profiles", "load_profile", "save_profile",
           "SCHEMA_VERSION", "TABLES"]
