/* A stand-in libcupti for testing the injection library without a GPU (inject/tests/load.rs).
 * It implements the four CUPTI entry points the library binds, with the CUDA 12/13 signatures,
 * and one test hook, fake_cupti_call, that plays the driver: it invokes the subscribed callback
 * for one driver-API call site with a CUpti_CallbackData laid out as cupti_callbacks.h declares.
 * FAKE_CUPTI_SUBSCRIBE_RESULT=<n> makes cuptiSubscribe fail with CUptiResult n. */
#include <stdint.h>
#include <stdlib.h>

typedef void (*callback_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);

typedef struct {
  int callback_site;
  const char *function_name;
  const void *function_params;
  void *function_return_value;
  const char *symbol_name;
  void *context;
  uint32_t context_uid;
  uint64_t *correlation_data;
  uint32_t correlation_id;
} callback_data;

static callback_fn subscribed;
static void *subscribed_userdata;
static int driver_domain_enabled;

int cuptiSubscribe(void **subscriber, callback_fn callback, void *userdata) {
  const char *forced = getenv("FAKE_CUPTI_SUBSCRIBE_RESULT");
  if (forced && atoi(forced) != 0) return atoi(forced);
  if (subscribed) return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
  subscribed = callback;
  subscribed_userdata = userdata;
  *subscriber = (void *)&subscribed;
  return 0;
}

int cuptiEnableDomain(uint32_t enable, void *subscriber, int domain) {
  if (subscriber != (void *)&subscribed || domain != 1) return 1; /* INVALID_PARAMETER */
  driver_domain_enabled = enable != 0;
  return 0;
}

int cuptiGetResultString(int result, const char **text) {
  *text = result == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR_FAKE";
  return 0;
}

int cuptiGetVersion(uint32_t *version) {
  *version = 999;
  return 0;
}

/* One callback: site 0 = CUPTI_API_ENTER, 1 = CUPTI_API_EXIT. Returns -1 if nobody listens. */
int fake_cupti_call(uint32_t cbid, int site, const char *name, const void *params, int result,
                    const char *symbol, uint64_t *correlation) {
  if (!subscribed || !driver_domain_enabled) return -1;
  callback_data data = {site, name, params, &result, symbol, 0, 1, correlation, 7};
  subscribed(subscribed_userdata, 1, cbid, &data);
  return 0;
}
