// The translation unit the shared precompiled torch header (cmake/MfsdpPch.cmake) is made for.
