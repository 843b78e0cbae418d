//! inject — a CUPTI injection library that writes breadcrumbs for unmodified CUDA programs (being built).
