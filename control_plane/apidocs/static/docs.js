// Starts Swagger UI on this server's OpenAPI document. A file, not an inline script, so the
// page's Content-Security-Policy can allow scripts from this origin only.
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.specUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null, // the default badge would call a validator on the internet
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
